"""The `torch.accelerator` the application sees: on a CUDA machine it is CUDA, so here it is the
application's `torch.cuda` (its facade) under PyTorch's device-generic names.

`current_accelerator()` is the device the application's "cuda" stands for (its `.type` reads
'cuda', as on the GPU machine); availability, the device count (one per torchrun local rank where
ranks share the target), the current index, streams, synchronization and memory statistics are
torch.cuda's answers. What has no CUDA twin (`get_device_capability`'s dtype table, host caches,
graphs) stays the real module's. Libraries keep the real `torch.accelerator`.
"""

from __future__ import annotations

import types

import torch

from torchport.retarget import state
from torchport.retarget.standin import facade_module

__all__ = ["build_accelerator_module"]

#: torch.accelerator name -> the torch.cuda facade's name answering it.
_FROM_CUDA = {
    "is_available": "is_available",
    "device_count": "device_count",
    "current_device_index": "current_device",
    "current_device_idx": "current_device",
    "set_device_index": "set_device",
    "set_device_idx": "set_device",
    "synchronize": "synchronize",
    "current_stream": "current_stream",
    "set_stream": "set_stream",
    "empty_cache": "empty_cache",
    "memory_stats": "memory_stats",
    "memory_allocated": "memory_allocated",
    "max_memory_allocated": "max_memory_allocated",
    "memory_reserved": "memory_reserved",
    "max_memory_reserved": "max_memory_reserved",
    "reset_peak_memory_stats": "reset_peak_memory_stats",
    "get_memory_info": "mem_get_info",
}


def current_accelerator(check_available: bool = False):
    """The application's "cuda" device (None, as torch's, when no device is visible and asked to check):
    the target's device type without an index, as torch's answer is (`device(type='cuda')`), so that
    `f"{torch.accelerator.current_accelerator()}:{local_rank}"` names a device."""
    retarget = state.current()
    retarget.redirected("torch.accelerator.current_accelerator")
    if check_available and not retarget.visible():
        return None
    device = retarget.device(None)
    return device if device.index is None else torch.device(device.type)


class device_index:  # noqa: N801 - mirrors torch.accelerator.device_index
    """`with torch.accelerator.device_index(i):` — torch.cuda.device(i) of the facade; None changes nothing."""

    def __init__(self, index, cuda: types.ModuleType):
        self._inner = cuda.device(index) if index is not None else None

    def __enter__(self):
        if self._inner is not None:
            self._inner.__enter__()
        return self

    def __exit__(self, *exc_info):
        if self._inner is not None:
            return self._inner.__exit__(*exc_info)
        return False


def build_accelerator_module(cuda: types.ModuleType) -> types.ModuleType:
    """A `torch.accelerator` facade answered by the `torch.cuda` facade `cuda`."""
    real = torch.accelerator
    overrides = {name: getattr(cuda, cuda_name) for name, cuda_name in _FROM_CUDA.items() if hasattr(real, name)}
    overrides["current_accelerator"] = current_accelerator
    overrides["device_index"] = lambda index, /: device_index(index, cuda)
    real_memory = getattr(real, "memory", None)
    if isinstance(real_memory, types.ModuleType):
        overrides["memory"] = facade_module(real_memory, {name: value for name, value in overrides.items()
                                                          if hasattr(real_memory, name)})
    return facade_module(real, overrides)
