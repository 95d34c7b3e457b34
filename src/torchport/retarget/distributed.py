"""torch.distributed as the application sees it: 'nccl' becomes the target's backend."""

from __future__ import annotations

import os

import torch.distributed as dist

from torchport.retarget import state

__all__ = ["map_backend", "init_process_group", "new_group", "get_backend", "is_nccl_available", "init_device_mesh"]

_real_init_process_group = dist.init_process_group
_real_new_group = dist.new_group
_real_get_backend = dist.get_backend

#: The process groups the application asked NCCL for (None: the default group), by id, with the
#: backend that serves them: get_backend answers 'nccl' for them, as on a GPU machine.
_asked_nccl: dict = {}


def map_backend(backend):
    """'nccl' (alone or in 'cpu:gloo,cuda:nccl') -> the target's collective backend."""
    if not isinstance(backend, str):
        return backend
    retarget = state.current()
    target = retarget.backend.dist_backend
    if backend.lower() == "nccl":
        retarget.redirected("init_process_group('nccl')")
        return target
    if "cuda:" in backend:
        retarget.redirected("init_process_group('cuda:nccl')")
        parts = [part for part in backend.split(",") if not part.startswith("cuda:")]
        if retarget.accelerator:
            parts.append(f"{retarget.type}:{target}")
        return ",".join(parts) or target
    return backend


def init_process_group(backend=None, *args, **kwargs):
    if "device_id" in kwargs:
        from torchport.retarget.runtime import map_device

        kwargs["device_id"] = map_device(kwargs["device_id"])
        if not state.current().accelerator:
            kwargs["device_id"] = None
    mapped = map_backend(backend)
    retarget = state.current()
    method = retarget.backend.dist_init_method
    if method and mapped == retarget.backend.dist_backend and not args and kwargs.get("init_method") is None \
            and kwargs.get("store") is None:
        kwargs["init_method"] = method
        retarget.decide("init_process_group", f"init_method={method!r}: {retarget.backend.name}'s process groups "
                                              "rendezvous through its runtime", kind="device")
    result = _real_init_process_group(mapped, *args, **kwargs)
    _remember(None, backend, mapped)
    _check_world(retarget, kwargs.get("world_size"))
    return result


def _check_world(retarget, asked) -> None:
    """The group must span the processes asked for (`world_size=`, or the launcher's WORLD_SIZE): a
    runtime that does not join processes (one on the host CPU, under torchrun) makes each a world of
    one, where every collective would silently reduce a process with itself."""
    expected = asked if isinstance(asked, int) and asked > 0 else os.environ.get("WORLD_SIZE", "")
    if not str(expected).isdigit() or int(expected) == dist.get_world_size():
        return
    error = RuntimeError(
        f"torch.distributed on {retarget.backend.name} formed a group of {dist.get_world_size()} process(es) where "
        f"{expected} were started: its runtime here does not join processes, so each would train alone. Rehearse "
        "the distributed run with --device cpu or an emulated device; where the runtime joins processes, the "
        "same program runs distributed."
    )
    dist.destroy_process_group()
    raise error


def new_group(*args, **kwargs):
    backend = kwargs.get("backend")
    if "backend" in kwargs:
        kwargs["backend"] = map_backend(kwargs["backend"])
    group = _real_new_group(*args, **kwargs)
    _remember(group, backend, kwargs.get("backend"))
    return group


def _remember(group, asked, mapped) -> None:
    """Keep what the application asked for a group it made with NCCL ('nccl', or NCCL for CUDA in a
    per-device string such as 'cpu:gloo,cuda:nccl'), for `get_backend` to answer."""
    if isinstance(asked, str) and "nccl" in asked.lower() and mapped != asked:
        _asked_nccl[id(group) if group is not None else None] = (group, mapped, asked)
    else:
        _asked_nccl.pop(id(group) if group is not None else None, None)


def get_backend(group=None):
    """`dist.get_backend()`: for a group the application created with NCCL (served by the target's
    backend) what a GPU machine answers, 'nccl' or its per-device string ('cpu:gloo,cuda:nccl');
    torch's answer otherwise."""
    real = _real_get_backend(group)
    key = None if group is None or group is dist.GroupMember.WORLD else id(group)
    found = _asked_nccl.get(key)
    if found is not None and (key is None or found[0] is group) and str(real) == str(found[1]):
        return "nccl" if found[2].lower() == "nccl" else found[2]
    return real


def is_nccl_available() -> bool:
    """True: NCCL requests are served by the target's collective backend."""
    return True


def init_device_mesh(device_type, *args, **kwargs):
    """`init_device_mesh("cuda", (n,))` (FSDP2, tensor parallelism): a mesh of the target's devices,
    its process groups on the target's collective backend."""
    from torch.distributed.device_mesh import init_device_mesh as real

    if device_type == "cuda":
        retarget = state.current()
        retarget.redirected("init_device_mesh('cuda')")
        device_type = retarget.type
    return real(device_type, *args, **kwargs)
