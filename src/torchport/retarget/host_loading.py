"""torch.load on a target that cannot restore storages (its profile's `loads_to_device` is false:
XLA, whose tensors have no storages torch could deserialize into).

There a checkpoint is read on the host and what a GPU machine would restore on CUDA is then copied
to the target ("load to the host and copy", the profile's advice): the storages saved on CUDA (or
every storage, for `map_location='cuda'`), and the tensors saved without storages (XLA's own, kept
as arrays, and wrapper subclasses), which torch rebuilds directly on the device it is told. What was
saved on the CPU stays there, as on a GPU machine.

`HostStorages` is the `map_location` torch sees. torch asks a dict-like map_location in two places:
the storage loader (`map_location.get(location, location)`, then the registered deserializers) and
`torch._utils._get_restore_location` for tensors without storages; a callable is refused by the
latter ("Callable map_location not supported with _rebuild_device_tensor_from_numpy"). Storages go
to the host under the location `HOST`, which a deserializer registered here recognises, restoring
them on the host and noting them for the copy; tensors without storages go to the target device.
"""

from __future__ import annotations

import sys
import threading

import torch
from torchport.retarget import state
from torchport.retarget.device_values import map_in_place

__all__ = ["HostStorages", "load", "HOST"]

#: The location a storage bound for the target is restored at: the host, noted for the copy.
HOST = "torchport-host"
_REBUILD_WITHOUT_STORAGE = torch._utils._get_restore_location.__code__
_loading = threading.local()


class HostStorages(dict):
    """`map_location` sending CUDA locations (or every location, `every`) to the target through the host."""

    def __init__(self, every: bool = False, destination=None):
        super().__init__()
        self.every = every
        self.destination = destination  # the device of `map_location='cuda:N'`; None: each location's own

    def target_of(self, location: str):
        from torchport.retarget.runtime import map_device

        device = self.destination if self.destination is not None else map_device(location)
        return torch.device(device) if isinstance(device, str) else device

    def get(self, location, default=None):
        if not isinstance(location, str) or not (self.every or location.startswith("cuda")):
            return default
        if sys._getframe(1).f_code is _REBUILD_WITHOUT_STORAGE:
            return str(self.target_of(location))
        noted = getattr(_loading, "noted", None)
        if noted is not None:
            noted.append(location)
        return HOST


def _restore_on_host(storage, location):
    if location != HOST:
        return None
    pending = getattr(_loading, "pending", None)
    if pending is not None:
        pending[storage.data_ptr()] = _loading.noted[-1]
    return storage


# before the CPU's (10) and the emulated device's (5): the location is ours alone
torch.serialization.register_package(4, lambda obj: None, _restore_on_host)


def load(f, map_location: HostStorages, *args, **kwargs):
    """torch.load through the host, then what was bound for the target copied there."""
    outer = getattr(_loading, "pending", None), getattr(_loading, "noted", None)
    _loading.pending, _loading.noted = {}, []
    try:
        result = torch.load(f, map_location, *args, **kwargs)
        pending = _loading.pending
    finally:
        _loading.pending, _loading.noted = outer
    if not pending:
        return result
    state.current().redirected("torch.load of tensors saved on CUDA")

    def copy(value):
        if not isinstance(value, torch.Tensor) or value.device.type != "cpu":
            return value
        location = pending.get(value.untyped_storage().data_ptr())
        if location is None:
            return value
        moved = value.detach().to(map_location.target_of(location))
        if isinstance(value, torch.nn.Parameter):
            return torch.nn.Parameter(moved, requires_grad=value.requires_grad)
        return moved.requires_grad_(value.requires_grad)

    return map_in_place(result, copy)
