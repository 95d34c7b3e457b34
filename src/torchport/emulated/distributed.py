"""Collectives on the emulated device: torch.distributed and DDP with gloo underneath.

A real accelerator brings its own collective library (NCCL, the Neuron collectives, XLA's
all-reduce); the emulated device computes on the host, so its collectives are gloo's. gloo only
accepts CPU tensors, and a Python backend cannot give a process group a C++ backend of its own, so
the emulated device's kernels for the ``c10d`` collective ops are replaced here: each one hands the
same op CPU views of the device tensors' bytes, which dispatches to the process group's CPU backend
(gloo), and returns the device tensors. The results land in device memory without a copy, and
everything built on those ops (``dist.all_reduce``, ``broadcast``, ``all_gather``,
``reduce_scatter``, ``barrier``, send/recv, DDP's parameter broadcast, shape verification and
gradient-bucket all-reduce) works with emulated tensors.

The c10d backend ``emulated`` (`BACKEND_NAME`) is gloo registered for both the CPU and the emulated
device: the emulated targets' ``dist_backend``, so ``init_process_group('nccl')`` in retargeted code
becomes ``init_process_group('emulated')``. A plain ``gloo`` process group works as well, except
that it cannot be bound to the device with ``device_id``.

As on a real accelerator, one collective cannot mix device and CPU tensors.
"""

from __future__ import annotations

import torch

from torchport.emulated.state import DEVICE_TYPE
from torchport.errors import EmulatedDeviceError

__all__ = ["install", "is_installed", "COLLECTIVE_OPS", "BACKEND_NAME"]

#: The c10d backend name for the emulated device: gloo, registered for the CPU and the emulated
#: device (so ``init_process_group(BACKEND_NAME, device_id=...)`` binds to the device, and
#: ``init_process_group()`` with no backend picks it when the emulated device is the accelerator).
BACKEND_NAME = "emulated"

#: The c10d ops whose emulated-device kernels are replaced (every one with a PrivateUse1 kernel).
COLLECTIVE_OPS = (
    "allreduce_",
    "allreduce_coalesced_",
    "broadcast_",
    "reduce_",
    "allgather_",
    "_allgather_base_",
    "allgather_coalesced_",
    "allgather_into_tensor_coalesced_",
    "reduce_scatter_",
    "_reduce_scatter_base_",
    "reduce_scatter_tensor_coalesced_",
    "alltoall_",
    "alltoall_base_",
    "gather_",
    "scatter_",
    "send",
    "recv_",
    "recv_any_source_",
    "barrier",
)

_library = None


def is_installed() -> bool:
    """Whether the emulated device's collective kernels are in place in this process."""
    return _library is not None


def _mixing_error(name: str, host: torch.Tensor) -> EmulatedDeviceError:
    return EmulatedDeviceError(
        f"c10d::{name} got a CPU tensor of shape {tuple(host.shape)} together with emulated device tensors: "
        "a collective on the accelerator takes device tensors only. Move it with .to(device) first."
    )


def _to_host(value, name: str, device_type: str, allow_cpu: bool):
    from torchport.emulated.storage import to_host

    if isinstance(value, torch.Tensor):
        if value.device.type == device_type:
            return to_host(value)
        if not allow_cpu and value.numel():
            raise _mixing_error(name, value)
        return value
    if isinstance(value, (list, tuple)):
        return type(value)(_to_host(item, name, device_type, allow_cpu) for item in value)
    return value


def _kernel(name: str):
    op = getattr(torch.ops.c10d, name).default
    # barrier's tensor only says which device's backend to use; it carries no data.
    allow_cpu = name == "barrier"

    def collective(*args, **kwargs):
        host_args = [_to_host(value, name, DEVICE_TYPE, allow_cpu) for value in args]
        host_kwargs = {key: _to_host(value, name, DEVICE_TYPE, allow_cpu) for key, value in kwargs.items()}
        # CPU tensors only now: the op runs on the process group's CPU backend (gloo).
        result = op(*host_args, **host_kwargs)
        if isinstance(result, tuple):
            # (outputs, work): the outputs are the first argument's tensors, written in place.
            return (args[0],) + tuple(result[1:])
        return result

    collective.__name__ = f"emulated_{name}"
    return collective


def _create_backend(options, backend_options):
    """The c10d backend behind BACKEND_NAME: a gloo process group (the collectives run on CPU views)."""
    from torch.distributed import ProcessGroupGloo

    backend = ProcessGroupGloo(options.store, options.group_rank, options.group_size, timeout=options.timeout)
    backend.options.global_ranks_in_group = list(options.global_ranks_in_group)
    backend.options.group_name = options.group_id
    backend._set_sequence_number_for_group()
    return backend


def _register_backend() -> None:
    from torch.distributed import Backend

    if BACKEND_NAME.upper() in Backend._plugins or not torch.distributed.is_gloo_available():
        return
    Backend.register_backend(BACKEND_NAME, _create_backend, extended_api=True, devices=["cpu", DEVICE_TYPE])


def install() -> None:
    """Replace the emulated device's c10d kernels (once per process; needs torch.distributed)."""
    global _library
    if _library is not None or not torch.distributed.is_available():
        return
    import warnings

    library = torch.library.Library("c10d", "IMPL")
    with warnings.catch_warnings():
        # PyTorch warns that the built-in PrivateUse1 kernels are being overridden: that is the point.
        warnings.simplefilter("ignore")
        for name in COLLECTIVE_OPS:
            if hasattr(torch.ops.c10d, name):
                library.impl(name, _kernel(name), "PrivateUse1")
    _library = library
    _register_backend()
    _refuse_unused_parameter_search()


def _refuse_unused_parameter_search() -> None:
    """DDP(find_unused_parameters=True) copies its map of used parameters to the device through
    pinned host memory, which needs a C++ pinned allocator a Python backend cannot register: the
    first backward would stop deep in the reducer with a message about PrivateUse1 hooks. A module on
    the emulated device is refused at construction with what is missing and the ways on."""
    from torch.nn.parallel import DistributedDataParallel

    genuine = DistributedDataParallel.__init__

    def __init__(self, module, *args, **kwargs):
        if kwargs.get("find_unused_parameters") and any(
                parameter.device.type == DEVICE_TYPE for parameter in module.parameters()):
            from torchport.emulated.errors import not_emulated

            raise not_emulated("DistributedDataParallel(find_unused_parameters=True)",
                               "the reducer copies its map of used parameters to the device through pinned host "
                               "memory, which the emulated device cannot allocate for C++ code; rehearse it with "
                               "--device cpu, or pass find_unused_parameters=False where every parameter gets a "
                               "gradient")
        genuine(self, module, *args, **kwargs)

    __init__.__wrapped__ = genuine
    DistributedDataParallel.__init__ = __init__
