"""torch.load on a target that cannot restore storages (its profile's `loads_to_device` is false:
XLA, whose tensors have no storages torch could deserialize into).

There a checkpoint is read on the host and what a GPU machine would restore on CUDA is then copied
to the target ("load to the host and copy", the profile's advice): the storages saved on CUDA (or
every storage, for `map_location='cuda'`), and the tensors saved without storages (XLA's own, kept
as arrays, and wrapper subclasses), which torch rebuilds directly on the device it is told. What was
saved on the CPU stays there, as on a GPU machine.

`HostStorages` is the `map_location` torch sees (`HostFunction` for the application's callable).
torch asks a dict-like map_location in two places: the storage loader (`map_location.get(location, location)`, then the registered deserializers) and
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

__all__ = ["HostStorages", "HostFunction", "load", "HOST", "as_device", "cuda_to_target"]

#: The location a storage bound for the target is restored at: the host, noted for the copy.
HOST = "torchport-host"
_REBUILD_WITHOUT_STORAGE = torch._utils._get_restore_location.__code__
_loading = threading.local()


class HostStorages(dict):
    """`map_location` sending each saved location where `route` says: the target (through the host),
    or another device torch restores on itself. The default route: CUDA locations to the target."""

    def __init__(self, route=None):
        super().__init__()
        self.route = route or cuda_to_target

    def get(self, location, default=None):
        if not isinstance(location, str):
            return default
        destination = self.route(location)
        if destination is None:
            return default
        if destination.type != state.current().type:  # the host, say: torch restores it there
            return str(destination)
        if sys._getframe(1).f_code is _REBUILD_WITHOUT_STORAGE:
            return str(destination)
        noted = getattr(_loading, "noted", None)
        if noted is not None:
            noted.append(destination)
        return HOST


class HostFunction:
    """A callable `map_location` (`lambda storage, loc: storage.cuda(rank)`) on such a target: the
    application's function decides each storage's device as on a GPU machine; a storage it sends to
    the target is restored on the host and copied there."""

    def __init__(self, function, seen):
        self.function = function
        self.seen = seen  # the saved location as the application knows it

    def __call__(self, storage, location):
        result = self.function(storage, self.seen(location))
        if result is None:
            destination = cuda_to_target(location)
            if destination is None:
                return None  # torch's own restore
        elif not isinstance(result, torch.UntypedStorage) or result.device.type == "cpu":
            return result  # a storage kept on the host (or what torch refuses, as on a GPU machine)
        else:  # a storage the function moved itself (`storage.cuda(rank)`)
            destination, storage = result.device, result.cpu()
        if destination.type != state.current().type:
            return torch.serialization.default_restore_location(storage, str(destination))
        pending = getattr(_loading, "pending", None)
        if pending is not None:
            pending[storage.data_ptr()] = destination
        return storage


def as_device(value) -> torch.device:
    return value if isinstance(value, torch.device) else torch.device(value)


def cuda_to_target(location: str):
    """Where a storage saved at `location` is restored when nothing says otherwise: CUDA's on the
    target, and the target's own ('xla:0', a library's checkpoint written there) too."""
    from torchport.retarget.runtime import map_device

    if location.startswith("cuda"):
        return as_device(map_device(location))
    return as_device(location) if location.partition(":")[0] == state.current().type else None


def _restore_on_host(storage, location):
    if location != HOST:
        return None
    pending = getattr(_loading, "pending", None)
    if pending is not None:
        pending[storage.data_ptr()] = _loading.noted[-1]
    return storage


# before the CPU's (10) and the emulated device's (5): the location is ours alone
torch.serialization.register_package(4, lambda obj: None, _restore_on_host)


def load(f, map_location: HostStorages | HostFunction, *args, **kwargs):
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
        destination = pending.get(value.untyped_storage().data_ptr())
        if destination is None:
            return value
        moved = value.detach().to(destination)
        if isinstance(value, torch.nn.Parameter):
            return torch.nn.Parameter(moved, requires_grad=value.requires_grad)
        return moved.requires_grad_(value.requires_grad)

    return map_in_place(result, copy)
