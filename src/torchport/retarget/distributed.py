"""torch.distributed as the application sees it: 'nccl' becomes the target's backend."""

from __future__ import annotations

import torch.distributed as dist

from torchport.retarget import state

__all__ = ["map_backend", "init_process_group", "new_group"]

_real_init_process_group = dist.init_process_group
_real_new_group = dist.new_group


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
    return _real_init_process_group(map_backend(backend), *args, **kwargs)


def new_group(*args, **kwargs):
    if "backend" in kwargs:
        kwargs["backend"] = map_backend(kwargs["backend"])
    return _real_new_group(*args, **kwargs)
