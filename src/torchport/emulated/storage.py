"""Device storage: the CPU bytes behind every emulated tensor, and the device's memory accounting.

The CPU bytes hang off the device tensor's storage object, so views, ``detach``, ``Parameter`` and
autograd all share them. Every device allocation is a `_Block`; its lifetime is the allocation's.
"""

from __future__ import annotations

import os
import re
import weakref

import torch

from torchport.emulated.state import DEVICE_TYPE, state
from torchport.errors import EmulatedDeviceError

#: What the package re-exports: host views of device bytes and the memory accounting. The helpers
#: below them (wrap_new, wrap_view, block_of, ...) are the dispatcher's, imported by name.
__all__ = [
    "to_host",
    "adopt_host_storage",
    "memory_allocated",
    "max_memory_allocated",
    "reset_peak_memory_stats",
    "memory_stats",
]

_create_empty = torch._C._acc.create_empty_tensor
set_storage = torch.ops.aten.set_.source_Storage_storage_offset
# The CPU kernel of set_ only writes metadata when the storage is large enough, and works on
# device tensors; it is how every device tensor here gets its geometry.
GEOMETRY_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
_storage_from_pointer = torch._C._construct_storage_from_data_pointer
BLOCK_ATTRIBUTE = "_torchport_block"


class Block:
    """The CPU bytes behind one device storage; its lifetime is the device allocation's lifetime."""

    __slots__ = ("storage", "nbytes", "views", "pointer", "__weakref__")

    def __init__(self, storage: torch.UntypedStorage, nbytes: int) -> None:
        if state.forked_after_use:
            raise _forked_error()
        check_fits(nbytes)
        self.storage = storage
        self.nbytes = nbytes
        self.views: dict[torch.dtype, torch.Tensor] = {}
        self.pointer = storage.data_ptr()
        _blocks_by_pointer[self.pointer] = weakref.ref(self)
        state.allocated += nbytes
        state.bytes_allocated += nbytes
        state.allocations += 1
        if state.allocated > state.peak:
            state.peak = state.allocated

    def resize(self, nbytes: int) -> None:
        state.allocated += nbytes - self.nbytes
        if nbytes > self.nbytes:
            state.bytes_allocated += nbytes - self.nbytes
        else:
            state.bytes_freed += self.nbytes - nbytes
        self.nbytes = nbytes
        self.views.clear()
        self._forget_pointer()
        self.pointer = self.storage.data_ptr()
        _blocks_by_pointer[self.pointer] = weakref.ref(self)
        if state.allocated > state.peak:
            state.peak = state.allocated

    def _forget_pointer(self) -> None:
        entry = _blocks_by_pointer.get(self.pointer)
        if entry is not None and entry() in (None, self):
            del _blocks_by_pointer[self.pointer]

    def __del__(self) -> None:
        if not hasattr(self, "nbytes"):  # refused in __init__ (a forked child)
            return
        state.allocated -= self.nbytes
        state.bytes_freed += self.nbytes
        state.frees += 1
        self._forget_pointer()


def check_fits(nbytes: int) -> None:
    """The device holds the profile's `memory_bytes`: an allocation beyond what is left raises what
    CUDA's allocator raises there (torch.OutOfMemoryError, "... out of memory. Tried to allocate ..."),
    so the application's out-of-memory handling runs as on the target, before the host's own limit."""
    if _beyond_capacity(nbytes):
        raise _capacity_error(nbytes)  # built here, not held in a local: no traceback cycle keeps tensors alive


def _beyond_capacity(nbytes: int) -> bool:
    profile = state.profile
    return profile is not None and state.allocated + nbytes > profile.memory_bytes


def _capacity_error(nbytes: int) -> torch.OutOfMemoryError:
    """The device's error for allocating `nbytes` beyond the profile's capacity."""
    profile = state.profile
    total = profile.memory_bytes
    state.ooms += 1
    return torch.OutOfMemoryError(
        f"{_target_words()}. Tried to allocate {_gib(nbytes)}. Device 0 has a total capacity "
        f"of {_gib(total)} of which {_gib(max(total - state.allocated, 0))} is free; {_gib(state.allocated)} is "
        f"allocated by PyTorch on the device. ({profile.name}-emulated: the capacity is the profile's memory_bytes.)"
    )


def host_out_of_memory(error: RuntimeError, op_name: str) -> torch.OutOfMemoryError | None:
    """The device's out-of-memory error for the host allocator failing under a device op (the host
    holds the device's bytes, and may hold less than the device): what the application's handler
    for the target's out-of-memory catches. None when `error` is not the host running out."""
    global _HOST_MESSAGES
    if _HOST_MESSAGES is None:
        from torchport.profiles import load

        _HOST_MESSAGES = tuple(load("cpu").data["out_of_memory"]["messages"])
    message = str(error)
    if not any(phrase in message for phrase in _HOST_MESSAGES):
        return None
    # more than the device holds: the device's own error, whatever this host's memory (an application
    # matching the target's words, Accelerate's batch-size finder, sees them on every machine)
    asked = re.search(r"allocate (\d+) bytes", message)
    if asked and _beyond_capacity(int(asked.group(1))):
        return _capacity_error(int(asked.group(1)))
    name = state.profile.name if state.profile is not None else "the target"
    state.ooms += 1
    return torch.OutOfMemoryError(
        f"{_target_words()} in {op_name} ({name}-emulated): the host, which holds the emulated device's bytes, could "
        f"not allocate them ({message.strip().splitlines()[0]}); {_gib(state.allocated)} is allocated by PyTorch on "
        "the device."
    )


def _target_words() -> str:
    """How the target says it ran out of memory: its profile's first `out_of_memory` message ("CUDA out
    of memory" for CUDA), which handlers match (`"CUDA out of memory" in str(e)`, Lightning's
    batch-size finder)."""
    profile = state.profile
    said = ((profile.data.get("out_of_memory") or {}).get("messages") if profile is not None else None) or []
    return said[0] if said else "out of memory"


#: The host allocator's out-of-memory phrases (the cpu profile's `out_of_memory.messages`).
_HOST_MESSAGES: tuple[str, ...] | None = None


def _gib(nbytes: int) -> str:
    return f"{nbytes / 2**30:.2f} GiB"


def _forked_error() -> EmulatedDeviceError:
    target = state.profile.name if state.profile is not None else "the target"
    return EmulatedDeviceError(
        f"The emulated device ({target}) was used before this process was forked, and a forked child cannot use "
        "it, as CUDA cannot ('Cannot re-initialize CUDA in forked subprocess'): nothing made on the device here "
        "could reach the parent. Use the 'spawn' start method (DataLoader(multiprocessing_context='spawn'), "
        "mp.set_start_method('spawn')), or move the data to the device in the main process."
    )


def _after_fork_in_child() -> None:
    state.forked_after_use = state.allocations > 0


os.register_at_fork(after_in_child=_after_fork_in_child)


#: data pointer -> the block holding those bytes. PyTorch's C++ code sometimes wraps a device
#: pointer in a fresh storage (torch.save's legacy format, pickling, from_blob); such a storage
#: carries no block, and finds it here by its pointer.
_blocks_by_pointer: dict[int, weakref.ref] = {}


def block_of(tensor: torch.Tensor) -> Block:
    storage = tensor.untyped_storage()
    try:
        return getattr(storage, BLOCK_ATTRIBUTE)
    except AttributeError:
        entry = _blocks_by_pointer.get(storage.data_ptr())
        block = entry() if entry is not None else None
        if block is not None and block.nbytes >= storage.nbytes():
            setattr(storage, BLOCK_ATTRIBUTE, block)
            return block
        raise EmulatedDeviceError(
            f"Tensor on {tensor.device} has no bytes attached (shape {tuple(tensor.shape)}, dtype {tensor.dtype}). "
            "Create emulated tensors with torch factories or .to(device), not through raw storages."
        ) from None


def to_host(tensor: torch.Tensor) -> torch.Tensor:
    """A CPU tensor viewing the same bytes as an emulated `tensor` (no copy, no sync recorded)."""
    block = block_of(tensor)
    dtype = tensor.dtype
    flat = block.views.get(dtype)
    if flat is None:
        flat = torch.empty(0, dtype=dtype).set_(block.storage)
        block.views[dtype] = flat
    return flat.as_strided(tensor.size(), tensor.stride(), tensor.storage_offset())


def adopt_host_storage(host_storage: torch.UntypedStorage) -> torch.UntypedStorage:
    """A device storage that owns `host_storage`'s bytes (counted as device memory)."""
    nbytes = host_storage.nbytes()
    # The device storage points at the host bytes without owning them (the block owns them), so
    # its data_ptr() and nbytes() are real, as torch.save and DDP expect of device storages.
    storage = _storage_from_pointer(host_storage.data_ptr(), state.device, nbytes)
    setattr(storage, BLOCK_ATTRIBUTE, Block(host_storage, nbytes))
    return storage


def wrap_new(host: torch.Tensor) -> torch.Tensor:
    """A device tensor owning `host`'s storage."""
    storage = adopt_host_storage(host.untyped_storage())
    wrapper = _create_empty([0], host.dtype)
    set_storage.redispatch(GEOMETRY_KEYS, wrapper, storage, host.storage_offset(), host.size(), host.stride())
    return wrapper


def sync_geometry(wrapper: torch.Tensor, host: torch.Tensor) -> None:
    """After a kernel resized `wrapper`'s host view (out= ops), make the device tensor match."""
    block = block_of(wrapper)
    storage = wrapper.untyped_storage()
    host_storage = block.storage
    if host_storage.nbytes() != block.nbytes or storage.data_ptr() != host_storage.data_ptr():
        block.resize(host_storage.nbytes())
        storage = _storage_from_pointer(host_storage.data_ptr(), state.device, host_storage.nbytes())
        setattr(storage, BLOCK_ATTRIBUTE, block)
    set_storage.redispatch(GEOMETRY_KEYS, wrapper, storage, host.storage_offset(), host.size(), host.stride())


def wrap_view(host: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
    """A device tensor viewing `base`'s device storage with `host`'s geometry."""
    base_storage = base.untyped_storage()
    if getattr(base_storage, BLOCK_ATTRIBUTE).storage.data_ptr() != host.untyped_storage().data_ptr():
        return wrap_new(host)
    wrapper = _create_empty([0], host.dtype)
    set_storage.redispatch(GEOMETRY_KEYS, wrapper, base_storage, host.storage_offset(), host.size(), host.stride())
    return wrapper


def is_device(value) -> bool:
    return isinstance(value, torch.Tensor) and value.device.type == DEVICE_TYPE


def views_device_memory(source) -> bool:
    """Whether a CPU tensor is a host view of some device tensor's bytes (never true of user tensors)."""
    return isinstance(source, torch.Tensor) and source.untyped_storage().data_ptr() in _blocks_by_pointer


# -- memory accounting ----------------------------------------------------------------------------


def memory_allocated(device=None) -> int:
    """Bytes held by live tensors on the emulated device."""
    return state.allocated


def max_memory_allocated(device=None) -> int:
    """The most bytes held at once since the last `reset_peak_memory_stats`."""
    return state.peak


def reset_peak_memory_stats(device=None) -> None:
    """Start peak tracking again from the current allocation."""
    state.peak = state.allocated


def memory_stats(device=None) -> dict:
    """`torch.cuda.memory_stats`-style counters of the emulated device: every block is its own
    segment, always active, in the 'all' pool (the large and small pools read 0)."""
    blocks = {"current": state.allocations - state.frees, "peak": None,
              "allocated": state.allocations, "freed": state.frees}
    nbytes = {"current": state.allocated, "peak": state.peak,
              "allocated": state.bytes_allocated, "freed": state.bytes_freed}
    stats = {}
    for pool in ("all", "large_pool", "small_pool"):
        for kinds, values in ((("allocation", "segment", "active"), blocks),
                              (("allocated_bytes", "reserved_bytes", "active_bytes", "requested_bytes"), nbytes)):
            for kind in kinds:
                for metric, value in values.items():
                    if value is not None:
                        stats[f"{kind}.{pool}.{metric}"] = value if pool == "all" else 0
    stats["num_ooms"] = state.ooms
    return dict(sorted(stats.items()))


def install_storage_constructor() -> None:
    """`torch.UntypedStorage(n, device=<emulated>)`: what `copy.deepcopy` of a device tensor, an EMA
    copy of a model and `storage.to(device)` call. PyTorch builds such a storage with the device's
    C++ allocator, which a Python backend cannot register (the call would crash the process); here
    the storage is the one behind a new device tensor of `n` bytes, made the way every device
    tensor is. Other devices' storages are built by PyTorch as before."""
    base_new = torch._C.StorageBase.__new__

    def new(cls, *args, device=None, **kwargs):
        if device is None or torch.device(device).type != DEVICE_TYPE:
            return base_new(cls, *args, **kwargs) if device is None else base_new(cls, *args, device=device, **kwargs)
        if cls is not torch.UntypedStorage or kwargs or len(args) > 1:
            raise EmulatedDeviceError(f"torch.UntypedStorage{args} with {kwargs} on the emulated device is not "
                                      "supported; make a tensor on the device and take its untyped_storage()")
        source = args[0] if args else 0
        if isinstance(source, int):
            return torch.empty(source, dtype=torch.uint8, device=device).untyped_storage()
        return torch.tensor(list(source), dtype=torch.uint8, device=device).untyped_storage()

    torch.UntypedStorage.__new__ = new


def install_storage_resize() -> None:
    """`storage.resize_(n)` of a device storage (FSDP frees and regrows its flat parameters so) needs
    the device's C++ allocator, which a Python backend cannot register: PyTorch stops with an
    internal message about hooks. Here it stops with what is not emulated and the way out."""
    base_resize = torch.UntypedStorage.resize_

    def resize_(self, size):
        if self.device.type == DEVICE_TYPE:
            from torchport.emulated.errors import NotEmulatedError

            raise NotEmulatedError(
                "Resizing a storage on the emulated device (storage.resize_, which FullyShardedDataParallel "
                "uses to free and regrow its flat parameters) is not emulated yet; the real target may run it. "
                "Rehearse FSDP with --device cpu, or use DistributedDataParallel on the emulated device.",
                op="UntypedStorage.resize_",
            )
        return base_resize(self, size)

    torch.UntypedStorage.resize_ = resize_
