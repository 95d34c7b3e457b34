"""Dispatch on the emulated device: one boxed fallback for every op, and the ops it cannot express.

Every op reaches `fallback`, which unwraps device tensors to CPU views of the same bytes, runs the
CPU kernel, and wraps the results. The active profile (see `registration.activate`) decides what
happens to dtypes (computed in a narrower type, or refused) and which ops are recorded as host
fallbacks or unsupported.
"""

from __future__ import annotations

from typing import Any

import torch

from torchport.emulated.state import DEVICE_TYPE, state
from torchport.emulated.storage import (
    BLOCK_ATTRIBUTE,
    GEOMETRY_KEYS,
    Block,
    check_fits,
    host_out_of_memory,
    block_of,
    is_device,
    set_storage,
    sync_geometry,
    to_host,
    views_device_memory,
    wrap_new,
    wrap_view,
)
from torchport.emulated.errors import not_emulated
from torchport.errors import EmulatedDeviceError

__all__ = ["fallback", "account", "op_info", "install_special_ops", "unsupported_error", "layout_error", "install_layout_fallbacks"]

_CPU = torch.device("cpu")


# -- per-op facts, computed once per op overload --------------------------------------------------


class _OpInfo:
    """What the fallback needs to know about one op overload."""

    __slots__ = ("name", "rule_status", "returns", "scalar_result", "mixing_allowed", "kwarg_tensors", "tensor_positions",
                 "unreturned_writes", "scalar_positions", "scalar_names")

    def __init__(self, op) -> None:
        schema = op._schema
        self.name = f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name
        profile = state.profile
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
        # Tensors the op writes without returning them (fused_moving_avg_obs_fake_quant's running
        # statistics and per-channel scale): a kernel may resize them, which the device must follow.
        self.unreturned_writes = tuple(
            index for index, argument in enumerate(schema.arguments)
            if not argument.kwarg_only and argument.alias_info is not None and argument.alias_info.is_write
            and str(argument.type) == "Tensor" and ("arg", index, True) not in returns
        )
        return_types = [str(result.type) for result in schema.returns]
        self.scalar_result = bool(return_types) and all(
            kind in {"Scalar", "bool", "int", "float", "SymInt", "SymFloat", "SymBool"} for kind in return_types
        )
        self.mixing_allowed = schema.name in _MIXING_ALLOWED
        self.kwarg_tensors = len(positional) != len(schema.arguments)
        # Tensor arguments C++ may pass as wrapped numbers (at::remainder(tensor, 4) inside
        # take_along_dim): boxed into Python they arrive as plain numbers.
        self.tensor_positions = tuple(
            index for index, argument in enumerate(positional) if str(argument.type) == "Tensor"
        )
        # Numbers the op computes with (`mask != inf`, `add(x, y, alpha=0.1)`), not sizes or dims:
        # on a target that computes a dtype narrower, they are narrowed with the tensors.
        self.scalar_positions = tuple(
            index for index, argument in enumerate(positional) if str(argument.type) in _SCALAR_ARGUMENT_TYPES
        ) + self.tensor_positions
        self.scalar_names = frozenset(
            argument.name for argument in schema.arguments
            if argument.kwarg_only and str(argument.type) in _SCALAR_ARGUMENT_TYPES
        )


#: Schema types of the numbers an op computes with (a Scalar prints as "number").
_SCALAR_ARGUMENT_TYPES = {"number", "Optional[number]"}


# Ops a real accelerator accepts CPU tensors in (indices are moved for you on CUDA).
_MIXING_ALLOWED = {"aten::index", "aten::index_put_", "aten::_index_put_impl_", "aten::index_put"}


def op_info(op) -> _OpInfo:
    info = state.op_cache.get(op)
    if info is None:
        info = _OpInfo(op)
        state.op_cache[op] = info
    return info


def _mixing_error(info: _OpInfo, host: torch.Tensor) -> EmulatedDeviceError:
    if torch.get_default_device().type == DEVICE_TYPE:
        # factories land on the device: the host tensor most likely comes from a legacy constructor,
        # which ignores the default device (a GPU's default tensor type makes CUDA ones)
        fix = (f"The default device is {DEVICE_TYPE}, which torch's legacy constructors (torch.Tensor(data), "
               "torch.FloatTensor(data)) ignore, where set_default_tensor_type(torch.cuda.FloatTensor) on a GPU "
               "makes them CUDA tensors (a known gap): build it with torch.tensor(data), or move it with "
               ".to(device).")
    else:
        fix = "Move it with .to(device) first, as the real accelerator requires."
    return EmulatedDeviceError(
        f"Expected all tensors to be on the same device, but found at least two devices, {DEVICE_TYPE}:0 and cpu! "
        f"({info.name} got a CPU tensor of shape {tuple(host.shape)}.) {fix}"
    )


def _check_host_indexed(args: tuple) -> None:
    """A host tensor indexed (or index-put) with device indices: CUDA allows device and host indices
    into a device tensor, and host indices only into a host one (ATen's index meta: pytorch#69607)."""
    indices = args[1] if len(args) > 1 else ()
    if any(isinstance(index, torch.Tensor) and index.device.type == DEVICE_TYPE for index in indices or ()):
        raise EmulatedDeviceError(
            "indices should be either on cpu or on the same device as the indexed tensor (cpu). (A host tensor "
            f"indexed with {DEVICE_TYPE}:0 indices; a GPU raises this too.) Move the indexed tensor to the device "
            "(register it as a buffer, or .to(device)), or the indices to the host.")


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


_scalar_overloads: dict = {}
#: How a schema's Scalar argument type prints.
_SCALAR_TYPES = {"Scalar", "number"}


def _scalar_overload(op, positions: tuple):
    """The overload of `op` taking a Scalar at `positions` and otherwise the same arguments, or None."""
    key = (op, positions)
    if key not in _scalar_overloads:
        schema = op._schema
        packet = getattr(torch.ops.aten, schema.name.split("::")[-1], None)
        found = None
        for name in packet.overloads() if packet is not None else ():
            candidate = getattr(packet, name)._schema
            if len(candidate.arguments) != len(schema.arguments):
                continue
            if all(
                mine.name == theirs.name
                and (str(theirs.type) in _SCALAR_TYPES if index in positions else str(theirs.type) == str(mine.type))
                for index, (mine, theirs) in enumerate(zip(schema.arguments, candidate.arguments))
            ):
                found = getattr(packet, name)
                break
        _scalar_overloads[key] = found
    return _scalar_overloads[key]


def _with_wrapped_numbers(op, positions: tuple, host_args: list):
    """The op to call when C++ passed numbers for Tensor arguments (at::remainder(t, 4) in take_along_dim).

    Boxed into Python, C++'s wrapped numbers arrive as plain numbers. The op's Scalar overload
    wraps them again, with the type promotion of wrapped numbers; without one they become 0-dim
    tensors of the number's default dtype.
    """
    scalar_op = _scalar_overload(op, positions)
    if scalar_op is not None:
        return scalar_op
    for index in positions:
        host_args[index] = _wrapped_number(host_args[index])
    return op


def _wrapped_number(value) -> torch.Tensor:
    """A 0-dim CPU tensor for a number in a Tensor argument of an op without a Scalar overload."""
    if isinstance(value, bool):
        return torch.tensor(value)
    if isinstance(value, int):
        return torch.tensor(value, dtype=torch.int64)
    if isinstance(value, float):
        return torch.tensor(value, dtype=torch.get_default_dtype())
    return torch.tensor(value, dtype=torch.complex128 if torch.get_default_dtype() == torch.float64 else torch.complex64)


def _narrow_numbers(info: _OpInfo, args: tuple, found: list, host_args: list, kwargs: dict) -> None:
    """Python numbers an op on device tensors computes with, narrowed as the target narrows the
    dtype they compute in: on a target that computes float64 as float32, `mask != finfo(float64).max`
    compares with float32's rounding of the constant (inf, as the mask's own values are), and an int64
    constant beyond int32 wraps as the tensor's values did (a changed number is recorded as a changed
    value). The device tensors' values are narrowed already and are not touched."""
    dtype = found[0].dtype
    for tensor in found[1:]:
        dtype = torch.promote_types(dtype, tensor.dtype)
    if dtype.is_floating_point and dtype not in state.value_downcasts:
        return  # float32 tensors (the common case): every number computes in a type kept as it is
    for index in info.scalar_positions:
        if index >= len(host_args):
            continue
        value = host_args[index]
        if not isinstance(value, torch.Tensor):
            host_args[index] = _narrowed_number(value, dtype, info.name)
        elif value.dim() == 0 and isinstance(args[index], torch.Tensor) and args[index].is_cpu \
                and value.dtype in state.value_downcasts:
            # a Python number Python's binding wrapped into a 0-dim host tensor (`mask != inf`)
            number = value.item()
            narrowed = _narrowed_number(number, dtype, info.name)
            if narrowed != number:
                host_args[index] = torch.tensor(narrowed, dtype=value.dtype)
    for name in info.scalar_names & kwargs.keys() if kwargs else ():
        kwargs[name] = _narrowed_number(kwargs[name], dtype, info.name)


_INT32 = 2**31


def _narrowed_number(value, tensor_dtype: torch.dtype, info_name: str):
    """`value` as the target holds it when computed with tensors of `tensor_dtype`."""
    if value.__class__ is bool or not isinstance(value, (int, float)):
        return value
    if isinstance(value, float) and not (tensor_dtype.is_floating_point or tensor_dtype.is_complex):
        dtype = torch.get_default_dtype()
    else:
        dtype = torch.int64 if tensor_dtype == torch.bool else tensor_dtype
    narrow = state.value_downcasts.get(dtype)
    if narrow is None:
        return value
    if narrow is torch.int32 and isinstance(value, int):
        narrowed = value if -_INT32 <= value < _INT32 else (value + _INT32) % (2 * _INT32) - _INT32
    elif value != value:  # NaN stays NaN (and is no change to record)
        return value
    else:
        narrowed = torch.tensor(value, dtype=dtype).to(narrow).item()
    if narrowed != value:
        recorder = state.recorder
        if recorder is not None:
            recorder.record_downcast(info_name, dtype, narrow, True)
        elif dtype not in state.downcasts_noted and state.on_first_downcast is not None:
            state.downcasts_noted.add(dtype)
            state.on_first_downcast(info_name, dtype, narrow)
    return narrowed


def _check_dtype(dtype: torch.dtype, info_name: str) -> None:
    message = state.refused.get(dtype)
    if message is not None:
        raise EmulatedDeviceError(message + f" (op {info_name}; target {state.profile.name!r}.)")


def _downcast_values(host: torch.Tensor, info_name: str) -> None:
    """Round `host` in place through the target's narrower dtype and record the hazard."""
    narrow = state.value_downcasts[host.dtype]
    if host.numel() == 0:
        return
    rounded = host.to(narrow)
    recorder = state.recorder
    if recorder is not None:
        changed = not torch.equal(rounded.to(host.dtype), host)
        recorder.record_downcast(info_name, host.dtype, narrow, changed)
    elif host.dtype not in state.downcasts_noted and state.on_first_downcast is not None:
        state.downcasts_noted.add(host.dtype)
        state.on_first_downcast(info_name, host.dtype, narrow)
    host.copy_(rounded)


def _wrap_result(result, source, args, kwargs, info: _OpInfo, found=()):
    if not isinstance(result, torch.Tensor):
        if isinstance(result, (list, tuple)):
            return type(result)(_wrap_result(item, source, args, kwargs, info, found) for item in result)
        return result
    if result.layout != torch.strided:
        raise layout_error(info.name, result.layout)
    if result._is_zerotensor():
        # autograd's storage-less zeros (_efficientzerotensor, e.g. sgn's gradient of a real input):
        # the device holds them as ordinary zeros.
        result = torch.zeros(result.size(), dtype=result.dtype)
    if result.is_nested:
        # Made from dense device tensors (_nested_tensor_from_mask, nested_tensor): see emulated/nested.py.
        from torchport.emulated.nested import to_device

        return to_device(result)
    if source is not None:
        kind, where, is_write = source
        original = args[where] if kind == "arg" else kwargs[where]
        if is_write and isinstance(original, torch.Tensor):
            if result.dtype in state.value_downcasts and state.downcast:
                _downcast_values(result, info.name)
            if result.size() != original.size() or result.stride() != original.stride():
                sync_geometry(original, result)
            return original
        if isinstance(original, torch.Tensor) and not original.is_cpu:
            return wrap_view(result, original)
        if isinstance(original, (list, tuple)):
            for candidate in original:
                if isinstance(candidate, torch.Tensor) and not candidate.is_cpu:
                    return wrap_view(result, candidate)
    if found:
        # Kernels such as _unsafe_view return an input's bytes without saying so in the schema:
        # the result must share that input's device storage, or in-place updates would diverge.
        data_pointer = result.untyped_storage().data_ptr()
        if data_pointer:
            for candidate in found:
                if block_of(candidate).storage.data_ptr() == data_pointer:
                    return wrap_view(result, candidate)
    dtype = result.dtype
    if dtype in state.refused:
        _check_dtype(dtype, info.name)
    if dtype in state.value_downcasts and state.downcast:
        _downcast_values(result, info.name)
    return wrap_new(result)


def fallback(op, *args, **kwargs):
    special = _SPECIAL.get(op)
    if special is not None:
        return special(op, args, kwargs)
    info = state.op_cache.get(op) or op_info(op)
    if info.mixing_allowed and args and isinstance(args[0], torch.Tensor) and args[0].is_cpu:
        _check_host_indexed(args)
    found: list = []
    host_args = [_unwrap(value, info, found) for value in args]
    if found and state.downcast and state.value_downcasts:
        _narrow_numbers(info, args, found, host_args, kwargs)
    numbers = tuple(
        index for index in info.tensor_positions
        if index < len(host_args) and isinstance(host_args[index], (bool, int, float, complex))
    )
    if numbers:
        op = _with_wrapped_numbers(op, numbers, host_args)
    host_kwargs = kwargs
    if kwargs:
        host_kwargs = {}
        for key, value in kwargs.items():
            if key == "device":
                value = _CPU
            elif key == "dtype" and value in state.refused:
                _check_dtype(value, info.name)
            else:
                value = _unwrap(value, info, found)
            host_kwargs[key] = value
    account(info, host_args, host_kwargs)
    try:
        result = op(*host_args, **host_kwargs)
    except RuntimeError as error:
        device_error = host_out_of_memory(error, info.name)
        if device_error is None:
            raise
        raise device_error from error
    for index in info.unreturned_writes:
        if index < len(args):
            _follow_resize(args[index], host_args[index])
    if info.scalar_result:
        return result
    returns = info.returns
    if isinstance(result, tuple):
        return tuple(
            _wrap_result(item, returns[index] if index < len(returns) else None, args, kwargs, info, found)
            for index, item in enumerate(result)
        )
    return _wrap_result(result, returns[0] if returns else None, args, kwargs, info, found)


def _follow_resize(original, host) -> None:
    """A device tensor the kernel wrote through its host view takes the view's new geometry, if resized."""
    if isinstance(original, torch.Tensor) and isinstance(host, torch.Tensor) and original is not host and (
        host.size() != original.size() or host.stride() != original.stride()
    ):
        sync_geometry(original, host)


def account(info: _OpInfo, host_args, host_kwargs) -> None:
    """Report one op call to the census; outside one, an op the profile says the target lacks is
    refused under strict mode (or where `refuse_unsupported` says so), and otherwise runs here and is
    named once (`on_first_unsupported`)."""
    recorder = state.recorder
    if recorder is not None:
        recorder.record_op(info, host_args, host_kwargs)
    elif info.rule_status == "unsupported":
        if state.strict or (state.refuse_unsupported is not None and state.refuse_unsupported()):
            raise unsupported_error(info)
        if info.name not in state.unsupported_noted and state.on_first_unsupported is not None:
            state.unsupported_noted.add(info.name)
            state.on_first_unsupported(info.name, state.profile.op_rule(info.name))


def unsupported_error(info: _OpInfo) -> EmulatedDeviceError:
    rule = state.profile.op_rule(info.name)
    return EmulatedDeviceError(
        f"Op {info.name} is unsupported on target {state.profile.name!r}: {rule.reason}. "
        f"Fix: {rule.fix or 'avoid the op'}. Run without strict mode to record it instead of failing."
    )


# -- ops the generic path cannot express -----------------------------------------------------------


def _copy(op, args, kwargs):
    destination, source = args[0], args[1]
    non_blocking = args[2] if len(args) > 2 else kwargs.get("non_blocking", False)
    recorder = state.recorder
    destination_host = to_host(destination) if is_device(destination) else destination
    if is_device(source):
        source_host = to_host(source)
        if recorder is not None and not is_device(destination):
            recorder.record_sync("aten::copy_ (device to host)")
    elif views_device_memory(source):
        # A host view of device bytes (a collective's result as c10d hands it back, see
        # emulated/distributed.py): on the target this is a device-to-device copy, not a transfer.
        source_host = source
        if source.data_ptr() == destination_host.data_ptr() and source.size() == destination_host.size() and (
            source.stride() == destination_host.stride()
        ):
            return destination
        if recorder is not None and is_device(destination):
            recorder.record_op(op_info(op), [destination_host, source_host], {})
    else:
        source_host = source
        if recorder is not None:
            recorder.record_transfer(source.nbytes if isinstance(source, torch.Tensor) else 0)
    if recorder is not None and is_device(source) and is_device(destination):
        # Transfers are not compiled; only device-to-device copies belong to a graph.
        recorder.record_op(op_info(op), [destination_host, source_host], {})
    if destination_host.dtype in state.refused and is_device(destination):
        _check_dtype(destination_host.dtype, "aten::copy_")
    destination_host.copy_(source_host, non_blocking=non_blocking)
    if is_device(destination) and destination_host.dtype in state.value_downcasts and state.downcast:
        _downcast_values(destination_host, "aten::copy_")
    return destination


def _copy_from(op, args, kwargs):
    source, destination = args[0], args[1]
    _copy(torch.ops.aten.copy_.default, (destination, source), {})
    return destination


def _set_source_storage(wrapper, storage, offset, size, stride):
    if storage.device.type == DEVICE_TYPE and not hasattr(storage, BLOCK_ATTRIBUTE):
        check_fits(storage.nbytes())  # before the host allocates it
        host_storage = torch.UntypedStorage(storage.nbytes())
        setattr(storage, BLOCK_ATTRIBUTE, Block(host_storage, storage.nbytes()))
    set_storage.redispatch(GEOMETRY_KEYS, wrapper, storage, offset, size, stride)
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
    replacement = wrap_new(host)
    return _set_source_storage(wrapper, replacement.untyped_storage(), 0, [0], [1])


def _resize(op, args, kwargs):
    wrapper = args[0]
    host = to_host(wrapper)
    block = block_of(wrapper)
    op(host, *args[1:], **kwargs)
    sync_geometry(wrapper, host)
    return wrapper


_SPECIAL: dict = {}


def install_special_ops() -> None:
    aten = torch.ops.aten
    _SPECIAL[aten.copy_.default] = _copy
    _SPECIAL[aten._copy_from.default] = _copy_from
    for overload in ("source_Storage_storage_offset", "source_Storage", "source_Tensor", "default"):
        _SPECIAL[getattr(aten.set_, overload)] = _set
    _SPECIAL[aten.resize_.default] = _resize


# -- layouts other than dense ----------------------------------------------------------------------

#: dispatch key of device tensors in each non-dense layout -> the layout
_LAYOUT_KEYS = {
    "SparsePrivateUse1": torch.sparse_coo,
    "SparseCsrPrivateUse1": torch.sparse_csr,
}


def layout_error(op_name: str, layout: torch.layout) -> Exception:
    """Refused by the profile when it says the target lacks `layout`; otherwise not emulated yet."""
    layout_name = str(layout).removeprefix("torch.")
    profile = state.profile
    layouts = profile.data.get("layouts") if profile is not None else None
    rule = layouts.get(layout_name) if isinstance(layouts, dict) else None
    if isinstance(rule, dict) and rule.get("status") in ("refused", "unsupported"):
        why = rule.get("note") or rule.get("reason") or rule.get("source") or "the profile refuses it"
        return EmulatedDeviceError(
            f"Op {op_name}: layout torch.{layout_name} is not supported on target {profile.name!r} ({why}). "
            f"Fix: {rule.get('fix') or 'use dense tensors (.to_dense()) on the device'}."
        )
    return not_emulated(op_name, f"torch.{layout_name} tensors on the device (only dense tensors are emulated)")


def _layout_fallback(layout: torch.layout):
    def refuse(op, *args, **kwargs):
        schema = op._schema
        name = f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name
        raise layout_error(name, layout)

    return refuse


def install_layout_fallbacks(libraries: list) -> None:
    """Every op on a sparse device tensor says what it is (refused or not emulated), never a C++ crash."""
    for key, layout in _LAYOUT_KEYS.items():
        library = torch.library.Library("_", "IMPL")
        library.fallback(_layout_fallback(layout), key)
        libraries.append(library)
