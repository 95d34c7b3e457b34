"""The emulated target device: a real PyTorch device (PrivateUse1, named ``emulated``) computing on the CPU.

Tensors on it are distinct from CPU tensors (mixing them fails as on a real accelerator), and the
active target profile decides what happens to dtypes (computed in a narrower type, or refused) and
which ops are recorded as host fallbacks or unsupported. Every op reaches one boxed fallback that
unwraps device tensors to CPU views of the same bytes, runs the CPU kernel, and wraps the results.
The CPU bytes hang off the device tensor's storage object, so views, ``detach``, ``Parameter`` and
autograd all share them.

The device type is registered once per process; the profile can be switched at any time with
`activate`, so one process can rehearse several targets in turn.
"""

from __future__ import annotations

import sys
import threading
import weakref
from typing import Any

import torch

from torchport.errors import EmulatedDeviceError
from torchport.profiles import Profile, load

__all__ = [
    "DEVICE_TYPE",
    "activate",
    "active_profile",
    "is_registered",
    "register",
    "memory_allocated",
    "max_memory_allocated",
    "reset_peak_memory_stats",
    "set_recorder",
    "get_recorder",
    "downcast_enabled",
    "set_downcast_enabled",
    "set_strict",
    "to_host",
    "adopt_host_storage",
]

#: The torch device type of the emulated target (PrivateUse1 renamed; no digits allowed).
DEVICE_TYPE = "emulated"

_CPU = torch.device("cpu")
_create_empty = torch._C._acc.create_empty_tensor
_set_storage = torch.ops.aten.set_.source_Storage_storage_offset
# The CPU kernel of set_ only writes metadata when the storage is large enough, and works on
# device tensors; it is how every device tensor here gets its geometry.
_GEOMETRY_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
_storage_from_pointer = torch._C._construct_storage_from_data_pointer
_DEVICE: torch.device | None = None
_BLOCK_ATTRIBUTE = "_torchport_block"


class _State:
    """Process-wide state of the emulated device."""

    def __init__(self) -> None:
        self.registered = False
        self.profile: Profile | None = None
        self.recorder = None
        self.downcast = True
        self.strict = False
        self.allocated = 0
        self.peak = 0
        self.allocations = 0
        self.frees = 0
        self.lock = threading.Lock()
        # dtype -> narrower dtype for values, from the profile
        self.value_downcasts: dict[torch.dtype, torch.dtype] = {}
        self.refused: dict[torch.dtype, str] = {}
        self.op_cache: dict[Any, _OpInfo] = {}


_state = _State()


class _Block:
    """The CPU bytes behind one device storage; its lifetime is the device allocation's lifetime."""

    __slots__ = ("storage", "nbytes", "views", "pointer", "__weakref__")

    def __init__(self, storage: torch.UntypedStorage, nbytes: int) -> None:
        self.storage = storage
        self.nbytes = nbytes
        self.views: dict[torch.dtype, torch.Tensor] = {}
        self.pointer = storage.data_ptr()
        _blocks_by_pointer[self.pointer] = weakref.ref(self)
        state = _state
        state.allocated += nbytes
        state.allocations += 1
        if state.allocated > state.peak:
            state.peak = state.allocated

    def resize(self, nbytes: int) -> None:
        _state.allocated += nbytes - self.nbytes
        self.nbytes = nbytes
        self.views.clear()
        self._forget_pointer()
        self.pointer = self.storage.data_ptr()
        _blocks_by_pointer[self.pointer] = weakref.ref(self)
        if _state.allocated > _state.peak:
            _state.peak = _state.allocated

    def _forget_pointer(self) -> None:
        entry = _blocks_by_pointer.get(self.pointer)
        if entry is not None and entry() in (None, self):
            del _blocks_by_pointer[self.pointer]

    def __del__(self) -> None:
        _state.allocated -= self.nbytes
        _state.frees += 1
        self._forget_pointer()


#: data pointer -> the block holding those bytes. PyTorch's C++ code sometimes wraps a device
#: pointer in a fresh storage (torch.save's legacy format, pickling, from_blob); such a storage
#: carries no block, and finds it here by its pointer.
_blocks_by_pointer: dict[int, weakref.ref] = {}


def _block_of(tensor: torch.Tensor) -> _Block:
    storage = tensor.untyped_storage()
    try:
        return getattr(storage, _BLOCK_ATTRIBUTE)
    except AttributeError:
        entry = _blocks_by_pointer.get(storage.data_ptr())
        block = entry() if entry is not None else None
        if block is not None and block.nbytes >= storage.nbytes():
            setattr(storage, _BLOCK_ATTRIBUTE, block)
            return block
        raise EmulatedDeviceError(
            f"Tensor on {tensor.device} has no bytes attached (shape {tuple(tensor.shape)}, dtype {tensor.dtype}). "
            "Create emulated tensors with torch factories or .to(device), not through raw storages."
        ) from None


def to_host(tensor: torch.Tensor) -> torch.Tensor:
    """A CPU tensor viewing the same bytes as an emulated `tensor` (no copy, no sync recorded)."""
    block = _block_of(tensor)
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
    storage = _storage_from_pointer(host_storage.data_ptr(), _DEVICE, nbytes)
    setattr(storage, _BLOCK_ATTRIBUTE, _Block(host_storage, nbytes))
    return storage


def _wrap_new(host: torch.Tensor) -> torch.Tensor:
    """A device tensor owning `host`'s storage."""
    storage = adopt_host_storage(host.untyped_storage())
    wrapper = _create_empty([0], host.dtype)
    _set_storage.redispatch(_GEOMETRY_KEYS, wrapper, storage, host.storage_offset(), host.size(), host.stride())
    return wrapper


def _sync_geometry(wrapper: torch.Tensor, host: torch.Tensor) -> None:
    """After a kernel resized `wrapper`'s host view (out= ops), make the device tensor match."""
    block = _block_of(wrapper)
    storage = wrapper.untyped_storage()
    host_storage = block.storage
    if host_storage.nbytes() != block.nbytes or storage.data_ptr() != host_storage.data_ptr():
        block.resize(host_storage.nbytes())
        storage = _storage_from_pointer(host_storage.data_ptr(), _DEVICE, host_storage.nbytes())
        setattr(storage, _BLOCK_ATTRIBUTE, block)
    _set_storage.redispatch(_GEOMETRY_KEYS, wrapper, storage, host.storage_offset(), host.size(), host.stride())


def _wrap_view(host: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
    """A device tensor viewing `base`'s device storage with `host`'s geometry."""
    base_storage = base.untyped_storage()
    if getattr(base_storage, _BLOCK_ATTRIBUTE).storage.data_ptr() != host.untyped_storage().data_ptr():
        return _wrap_new(host)
    wrapper = _create_empty([0], host.dtype)
    _set_storage.redispatch(_GEOMETRY_KEYS, wrapper, base_storage, host.storage_offset(), host.size(), host.stride())
    return wrapper


# -- per-op facts, computed once per op overload --------------------------------------------------


class _OpInfo:
    """What the fallback needs to know about one op overload."""

    __slots__ = ("name", "rule_status", "returns", "scalar_result", "mixing_allowed", "kwarg_tensors")

    def __init__(self, op) -> None:
        schema = op._schema
        self.name = f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name
        profile = _state.profile
        rule = profile.op_rule(self.name) if profile is not None else None
        self.rule_status = rule.status if rule is not None else "native"
        positional = [argument for argument in schema.arguments if not argument.kwarg_only]
        alias_sources: dict[str, tuple[str, Any]] = {}
        for index, argument in enumerate(schema.arguments):
            info = argument.alias_info
            if info is None:
                continue
            where = ("arg", index) if not argument.kwarg_only else ("kwarg", argument.name)
            for alias_set in info.before_set:
                alias_sources.setdefault(alias_set, where + (info.is_write,))
        returns = []
        for result in schema.returns:
            info = result.alias_info
            source = None
            if info is not None:
                for alias_set in info.before_set:
                    if alias_set in alias_sources:
                        source = alias_sources[alias_set]
                        break
            returns.append(source)
        self.returns = returns
        return_types = [str(result.type) for result in schema.returns]
        self.scalar_result = bool(return_types) and all(
            kind in {"Scalar", "bool", "int", "float", "SymInt", "SymFloat", "SymBool"} for kind in return_types
        )
        self.mixing_allowed = schema.name in _MIXING_ALLOWED
        self.kwarg_tensors = len(positional) != len(schema.arguments)


# Ops a real accelerator accepts CPU tensors in (indices are moved for you on CUDA).
_MIXING_ALLOWED = {"aten::index", "aten::index_put_", "aten::_index_put_impl_", "aten::index_put"}


def _op_info(op) -> _OpInfo:
    info = _state.op_cache.get(op)
    if info is None:
        info = _OpInfo(op)
        _state.op_cache[op] = info
    return info


def _mixing_error(info: _OpInfo, host: torch.Tensor) -> EmulatedDeviceError:
    return EmulatedDeviceError(
        f"Expected all tensors to be on the same device, but found at least two devices, {DEVICE_TYPE}:0 and cpu! "
        f"({info.name} got a CPU tensor of shape {tuple(host.shape)}.) Move it with .to(device) first, "
        "as the real accelerator requires."
    )


def _unwrap(value, info: _OpInfo, found: list):
    if isinstance(value, torch.Tensor):
        if value.is_cpu:
            if value.dim() and not info.mixing_allowed:
                raise _mixing_error(info, value)
            return value
        if value.device.type != DEVICE_TYPE:
            return value
        found.append(value)
        return to_host(value)
    if isinstance(value, (list, tuple)) and value and isinstance(value[0], torch.Tensor):
        return type(value)(_unwrap(item, info, found) if item is not None else None for item in value)
    if isinstance(value, (list, tuple)) and value and value[0] is None and any(
        isinstance(item, torch.Tensor) for item in value
    ):
        return type(value)(_unwrap(item, info, found) if item is not None else None for item in value)
    return value


def _check_dtype(dtype: torch.dtype, info_name: str) -> None:
    message = _state.refused.get(dtype)
    if message is not None:
        raise EmulatedDeviceError(message + f" (op {info_name}; target {_state.profile.name!r}.)")


def _downcast_values(host: torch.Tensor, info_name: str) -> None:
    """Round `host` in place through the target's narrower dtype and record the hazard."""
    narrow = _state.value_downcasts[host.dtype]
    if host.numel() == 0:
        return
    rounded = host.to(narrow)
    recorder = _state.recorder
    if recorder is not None:
        changed = not torch.equal(rounded.to(host.dtype), host)
        recorder.record_downcast(info_name, host.dtype, narrow, changed)
    host.copy_(rounded)


def _wrap_result(result, source, args, kwargs, info: _OpInfo, found=()):
    if not isinstance(result, torch.Tensor):
        if isinstance(result, (list, tuple)):
            return type(result)(_wrap_result(item, source, args, kwargs, info, found) for item in result)
        return result
    if source is not None:
        kind, where, is_write = source
        original = args[where] if kind == "arg" else kwargs[where]
        if is_write and isinstance(original, torch.Tensor):
            if result.dtype in _state.value_downcasts and _state.downcast:
                _downcast_values(result, info.name)
            if result.size() != original.size() or result.stride() != original.stride():
                _sync_geometry(original, result)
            return original
        if isinstance(original, torch.Tensor) and not original.is_cpu:
            return _wrap_view(result, original)
        if isinstance(original, (list, tuple)):
            for candidate in original:
                if isinstance(candidate, torch.Tensor) and not candidate.is_cpu:
                    return _wrap_view(result, candidate)
    if found:
        # Kernels such as _unsafe_view return an input's bytes without saying so in the schema:
        # the result must share that input's device storage, or in-place updates would diverge.
        data_pointer = result.untyped_storage().data_ptr()
        if data_pointer:
            for candidate in found:
                if _block_of(candidate).storage.data_ptr() == data_pointer:
                    return _wrap_view(result, candidate)
    dtype = result.dtype
    if dtype in _state.refused:
        _check_dtype(dtype, info.name)
    if dtype in _state.value_downcasts and _state.downcast:
        _downcast_values(result, info.name)
    return _wrap_new(result)


def _fallback(op, *args, **kwargs):
    special = _SPECIAL.get(op)
    if special is not None:
        return special(op, args, kwargs)
    info = _state.op_cache.get(op) or _op_info(op)
    found: list = []
    host_args = [_unwrap(value, info, found) for value in args]
    host_kwargs = kwargs
    if kwargs:
        host_kwargs = {}
        for key, value in kwargs.items():
            if key == "device":
                value = _CPU
            elif key == "dtype" and value in _state.refused:
                _check_dtype(value, info.name)
            else:
                value = _unwrap(value, info, found)
            host_kwargs[key] = value
    recorder = _state.recorder
    if recorder is not None:
        recorder.record_op(info, host_args, host_kwargs)
    elif info.rule_status == "unsupported" and _state.strict:
        raise _unsupported_error(info)
    result = op(*host_args, **host_kwargs)
    if info.scalar_result:
        return result
    returns = info.returns
    if isinstance(result, tuple):
        return tuple(
            _wrap_result(item, returns[index] if index < len(returns) else None, args, kwargs, info, found)
            for index, item in enumerate(result)
        )
    return _wrap_result(result, returns[0] if returns else None, args, kwargs, info, found)


def _unsupported_error(info: _OpInfo) -> EmulatedDeviceError:
    rule = _state.profile.op_rule(info.name)
    return EmulatedDeviceError(
        f"Op {info.name} is unsupported on target {_state.profile.name!r}: {rule.reason}. "
        f"Fix: {rule.fix or 'avoid the op'}. Run without strict mode to record it instead of failing."
    )


# -- ops the generic path cannot express -----------------------------------------------------------


def _is_device(value) -> bool:
    return isinstance(value, torch.Tensor) and value.device.type == DEVICE_TYPE


def _views_device_memory(source) -> bool:
    """Whether a CPU tensor is a host view of some device tensor's bytes (never true of user tensors)."""
    return isinstance(source, torch.Tensor) and source.untyped_storage().data_ptr() in _blocks_by_pointer


def _copy(op, args, kwargs):
    destination, source = args[0], args[1]
    non_blocking = args[2] if len(args) > 2 else kwargs.get("non_blocking", False)
    recorder = _state.recorder
    destination_host = to_host(destination) if _is_device(destination) else destination
    if _is_device(source):
        source_host = to_host(source)
        if recorder is not None and not _is_device(destination):
            recorder.record_sync("aten::copy_ (device to host)")
    elif _views_device_memory(source):
        # A host view of device bytes (a collective's result as c10d hands it back, see
        # check/distributed.py): on the target this is a device-to-device copy, not a transfer.
        source_host = source
        if source.data_ptr() == destination_host.data_ptr() and source.size() == destination_host.size() and (
            source.stride() == destination_host.stride()
        ):
            return destination
        if recorder is not None and _is_device(destination):
            recorder.record_op(_op_info(op), [destination_host, source_host], {})
    else:
        source_host = source
        if recorder is not None:
            recorder.record_transfer(source.nbytes if isinstance(source, torch.Tensor) else 0)
    if recorder is not None and _is_device(source) and _is_device(destination):
        # Transfers are not compiled; only device-to-device copies belong to a graph.
        recorder.record_op(_op_info(op), [destination_host, source_host], {})
    if destination_host.dtype in _state.refused and _is_device(destination):
        _check_dtype(destination_host.dtype, "aten::copy_")
    destination_host.copy_(source_host, non_blocking=non_blocking)
    if _is_device(destination) and destination_host.dtype in _state.value_downcasts and _state.downcast:
        _downcast_values(destination_host, "aten::copy_")
    return destination


def _copy_from(op, args, kwargs):
    source, destination = args[0], args[1]
    _copy(torch.ops.aten.copy_.default, (destination, source), {})
    return destination


def _set_source_storage(wrapper, storage, offset, size, stride):
    if storage.device.type == DEVICE_TYPE and not hasattr(storage, _BLOCK_ATTRIBUTE):
        host_storage = torch.UntypedStorage(storage.nbytes())
        setattr(storage, _BLOCK_ATTRIBUTE, _Block(host_storage, storage.nbytes()))
    _set_storage.redispatch(_GEOMETRY_KEYS, wrapper, storage, offset, size, stride)
    return wrapper


def _set(op, args, kwargs):
    wrapper = args[0]
    overload = op._schema.overload_name
    if overload == "source_Storage_storage_offset":
        storage, offset, size = args[1], args[2], args[3]
        stride = args[4] if len(args) > 4 else kwargs.get("stride", ())
        if not stride:
            stride = torch.empty(size, device="meta").stride()
        return _set_source_storage(wrapper, storage, offset, size, stride)
    if overload == "source_Storage":
        storage = args[1]
        count = storage.nbytes() // wrapper.element_size()
        return _set_source_storage(wrapper, storage, 0, [count], [1])
    if overload == "source_Tensor":
        source = args[1]
        return _set_source_storage(wrapper, source.untyped_storage(), source.storage_offset(), source.size(), source.stride())
    host = torch.empty(0, dtype=wrapper.dtype)
    replacement = _wrap_new(host)
    return _set_source_storage(wrapper, replacement.untyped_storage(), 0, [0], [1])


def _resize(op, args, kwargs):
    wrapper = args[0]
    host = to_host(wrapper)
    block = _block_of(wrapper)
    op(host, *args[1:], **kwargs)
    _sync_geometry(wrapper, host)
    return wrapper


_SPECIAL: dict = {}


def _install_special_ops() -> None:
    aten = torch.ops.aten
    _SPECIAL[aten.copy_.default] = _copy
    _SPECIAL[aten._copy_from.default] = _copy_from
    for overload in ("source_Storage_storage_offset", "source_Storage", "source_Tensor", "default"):
        _SPECIAL[getattr(aten.set_, overload)] = _set
    _SPECIAL[aten.resize_.default] = _resize


# -- the torch.emulated module, the hooks, and torch.accelerator ----------------------------------


def memory_allocated(device=None) -> int:
    """Bytes held by live tensors on the emulated device."""
    return _state.allocated


def max_memory_allocated(device=None) -> int:
    """The most bytes held at once since the last `reset_peak_memory_stats`."""
    return _state.peak


def reset_peak_memory_stats(device=None) -> None:
    """Start peak tracking again from the current allocation."""
    _state.peak = _state.allocated


def _memory_stats(device=None) -> dict:
    stats = {}
    for pool in ("all", "large_pool", "small_pool"):
        stats[f"allocated_bytes.{pool}.current"] = _state.allocated if pool == "all" else 0
        stats[f"allocated_bytes.{pool}.peak"] = _state.peak if pool == "all" else 0
        stats[f"reserved_bytes.{pool}.current"] = _state.allocated if pool == "all" else 0
        stats[f"reserved_bytes.{pool}.peak"] = _state.peak if pool == "all" else 0
        stats[f"active_bytes.{pool}.current"] = _state.allocated if pool == "all" else 0
        stats[f"active_bytes.{pool}.peak"] = _state.peak if pool == "all" else 0
    stats["allocation.all.allocated"] = _state.allocations
    stats["allocation.all.freed"] = _state.frees
    stats["allocation.all.current"] = _state.allocations - _state.frees
    return dict(sorted(stats.items()))


class _DeviceProperties:
    """What `get_device_properties` answers for the emulated target."""

    def __init__(self, profile: Profile) -> None:
        self.name = f"{profile.title} (emulated on the CPU)"
        self.total_memory = profile.memory_bytes
        self.type = DEVICE_TYPE

    def __repr__(self) -> str:
        return f"_DeviceProperties(name={self.name!r}, total_memory={self.total_memory})"


class _DeviceModule:
    """`torch.emulated`: the device module `torch.get_device_module('emulated')` returns."""

    _device_index = 0

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return True

    def _lazy_init(self) -> None:
        return None

    def _is_in_bad_fork(self) -> bool:
        return False

    def device_count(self) -> int:
        return 1

    def current_device(self) -> int:
        return self._device_index

    def set_device(self, device) -> None:
        index = torch.device(device).index if not isinstance(device, int) else device
        if index not in (None, 0):
            raise EmulatedDeviceError(f"Device index {index!r} does not exist; the emulated target has 1 device: 0.")

    def device(self, device):
        """Context manager selecting a device; the emulated target has one, so it changes nothing."""
        import contextlib

        return contextlib.nullcontext()

    def synchronize(self, device=None) -> None:
        recorder = _state.recorder
        if recorder is not None:
            recorder.record_sync("synchronize")

    def manual_seed(self, seed: int) -> None:
        return None

    def manual_seed_all(self, seed: int) -> None:
        return None

    def seed(self) -> None:
        return None

    def seed_all(self) -> None:
        return None

    def initial_seed(self) -> int:
        return torch.initial_seed()

    def get_rng_state(self, device=None):
        return torch.get_rng_state()

    def set_rng_state(self, state, device=None) -> None:
        torch.set_rng_state(state)

    def get_amp_supported_dtype(self) -> list:
        return [torch.float16, torch.bfloat16]

    def is_bf16_supported(self, including_emulation: bool = True) -> bool:
        return True

    def get_device_name(self, device=None) -> str:
        return _DeviceProperties(_state.profile).name

    def get_device_properties(self, device=None) -> _DeviceProperties:
        return _DeviceProperties(_state.profile)

    def get_device_capability(self, device=None) -> tuple[int, int]:
        return (8, 0)

    def mem_get_info(self, device=None) -> tuple[int, int]:
        total = _state.profile.memory_bytes
        return total - _state.allocated, total

    def empty_cache(self) -> None:
        return None

    memory_allocated = staticmethod(memory_allocated)
    max_memory_allocated = staticmethod(max_memory_allocated)
    reset_peak_memory_stats = staticmethod(reset_peak_memory_stats)
    memory_stats = staticmethod(_memory_stats)

    def memory_reserved(self, device=None) -> int:
        return _state.allocated

    def max_memory_reserved(self, device=None) -> int:
        return _state.peak

    def reset_accumulated_memory_stats(self, device=None) -> None:
        _state.allocations = _state.allocations - _state.frees
        _state.frees = 0


def _is_emulated_accelerator() -> bool:
    accelerator = torch._C._accelerator_getAccelerator() if hasattr(torch._C, "_accelerator_getAccelerator") else None
    return accelerator is not None and accelerator.type == DEVICE_TYPE


def _route_accelerator_calls() -> None:
    """Answer torch.accelerator's allocator and synchronize calls for the emulated device.

    Those calls reach C++ registries a Python backend cannot fill; each binding is wrapped so the
    emulated device answers and every other device keeps its original behaviour.
    """
    module = _DEVICE_MODULE
    replacements = {
        "_accelerator_synchronizeDevice": lambda index=None: module.synchronize(index),
        "_accelerator_isAllocatorInitialized": lambda: True,
        "_accelerator_getDeviceStats": lambda index=None: _memory_stats(index),
        "_accelerator_resetPeakStats": lambda index=None: reset_peak_memory_stats(index),
        "_accelerator_resetAccumulatedStats": lambda index=None: module.reset_accumulated_memory_stats(index),
        "_accelerator_emptyCache": lambda: None,
        "_accelerator_getMemoryInfo": lambda index=None: module.mem_get_info(index),
    }
    for name, replacement in replacements.items():
        original = getattr(torch._C, name, None)
        if original is None:
            continue

        def routed(*args, _original=original, _replacement=replacement):
            if _is_emulated_accelerator():
                return _replacement(*args)
            return _original(*args)

        routed.__name__ = name
        setattr(torch._C, name, routed)


class _Hooks(torch._C._acc.PrivateUse1Hooks):
    def is_available(self) -> bool:
        return True

    def has_primary_context(self, device_index) -> bool:
        return True

    def is_built(self) -> bool:
        return True


class _Guard(torch._C._acc.DeviceGuard):
    def type_(self):
        return torch._C._autograd.DeviceType.PrivateUse1


_DEVICE_MODULE = _DeviceModule()
_library = None


def is_registered() -> bool:
    """Whether this process has registered the emulated device type."""
    return _state.registered


def register() -> None:
    """Register the ``emulated`` device type with PyTorch (once per process; later calls do nothing)."""
    global _library
    with _state.lock:
        if _state.registered:
            return
        current = torch._C._get_privateuse1_backend_name()
        if current not in ("privateuseone", DEVICE_TYPE):
            raise EmulatedDeviceError(
                f"PrivateUse1 is already registered as {current!r} in this process, so the emulated device "
                f"cannot be registered. Run the emulated target in a process without the {current!r} backend."
            )
        from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

        _setup_privateuseone_for_python_backend(DEVICE_TYPE, _DEVICE_MODULE, _Hooks(), _Guard())
        global _DEVICE
        _DEVICE = torch.device(DEVICE_TYPE, 0)
        _install_special_ops()
        _library = torch.library.Library("_", "IMPL")
        _library.fallback(_fallback, "PrivateUse1")
        _route_accelerator_calls()
        from torchport.check import kernels, autocast, serialization, distributed

        kernels.install()
        autocast.install()
        serialization.install()
        distributed.install()
        _state.registered = True


def activate(profile: Profile | str) -> Profile:
    """Make `profile` the target the emulated device behaves like, registering the device if needed."""
    if isinstance(profile, str):
        profile = load(profile)
    register()
    value_downcasts: dict[torch.dtype, torch.dtype] = {}
    for name, narrow in profile.downcasts().items():
        value_downcasts[getattr(torch, name)] = getattr(torch, narrow)
    refused: dict[torch.dtype, str] = {}
    for name in profile.refused():
        rule = profile.dtype_rule(name)
        refused[getattr(torch, name)] = rule.message or (
            f"dtype torch.{name} is not supported on target {profile.name!r} ({rule.note or rule.source})."
            " Use torch.float32 (or another supported dtype) instead"
        )
    _state.profile = profile
    _state.value_downcasts = value_downcasts
    _state.refused = refused
    _state.op_cache.clear()
    return profile


def active_profile() -> Profile | None:
    """The profile the emulated device follows now, or None before `activate`."""
    return _state.profile


def set_recorder(recorder) -> None:
    """Install the census recorder that the fallback reports to (None removes it)."""
    _state.recorder = recorder


def get_recorder():
    """The census recorder installed now, or None."""
    return _state.recorder


def downcast_enabled() -> bool:
    """Whether narrower-dtype rounding is applied (turned off for the reference run of check)."""
    return _state.downcast


def set_downcast_enabled(enabled: bool) -> None:
    """Turn the profile's dtype downcasts on or off (dtype refusals always apply)."""
    _state.downcast = bool(enabled)


def set_strict(strict: bool) -> None:
    """In strict mode ops the profile marks unsupported raise instead of running on the host."""
    _state.strict = bool(strict)
