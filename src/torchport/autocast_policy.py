"""Autocast op policies as data, and the casts they make.

A profile's `autocast` lists (aten op names, `name.overload` where it matters) say which ops a
device's autocast runs in the autocast dtype, which in float32, and which in float32 unless the call
names a dtype; every other op runs in the dtype it receives. PyTorch implements each device's lists
in C++ (aten/src/ATen/autocast_mode.cpp); the kernels made here implement a list in Python for a
device's autocast dispatch key, with the casts PyTorch's own kernels make:

- a tensor is cast when it is eligible: floating point, on the autocast's device, not float64;
- lower precision: eligible tensors to the region's autocast dtype;
- float32: eligible tensors to float32;
- float32 unless a dtype is named: `dtype=torch.float32` when the call names none and its first
  tensor is eligible (softmax, sum and cumsum compute and return float32 from float16 inputs);
- promote: eligible tensors to the widest floating dtype among them (`scatter_add` of a float32
  tensor and a float16 one runs in float32);
- refused: the op raises the device's error (CUDA refuses binary_cross_entropy under autocast);
- any other op (a kernel whose kind is None) runs as it is; a composite one by its decomposition,
  whose parts still autocast (cross_entropy computes log_softmax and nll_loss with their own kinds).

Read by the emulated device (its own lists, those of the target it emulates) and by retargeting (the
lists of CUDA's autocast in the application's CUDA autocast regions).
"""

from __future__ import annotations

from typing import Callable

import torch

__all__ = ["LOWER", "FLOAT32", "FLOAT32_UNLESS_DTYPE", "PROMOTE", "REFUSED", "REFUSALS", "policy", "resolve", "make_kernel"]

LOWER, FLOAT32, FLOAT32_UNLESS_DTYPE, PROMOTE = "lower_precision", "float32", "float32_unless_dtype", "promote"
REFUSED = "refused"
_KINDS = (LOWER, FLOAT32, FLOAT32_UNLESS_DTYPE, PROMOTE)
#: op name -> the error an autocast that refuses the op raises (from the profiles read by `policy`)
REFUSALS: dict[str, str] = {}


def policy(profile) -> dict[str, str]:
    """{op name: LOWER | FLOAT32 | FLOAT32_UNLESS_DTYPE | PROMOTE | REFUSED} from `profile`'s `autocast`
    lists (a refusal's error kept in REFUSALS); a profile without lists has the CPU's (PyTorch's
    policy for a device that registers none of its own)."""
    lists = profile.data.get("autocast") if profile is not None else None
    if not lists:
        from torchport.profiles import load

        lists = load("cpu").data["autocast"]
    kinds = {name: kind for kind in _KINDS for name in lists.get(kind, ())}
    for name, message in (lists.get(REFUSED) or {}).items():
        kinds[name] = REFUSED
        REFUSALS[name] = message
    return kinds


def resolve(name: str):
    """The aten op overload `name` ('exp', 'pow.Tensor_Scalar') names, or None where this torch has none."""
    base, _, overload = name.partition(".")
    packet = getattr(torch.ops.aten, base, None)
    return getattr(packet, overload or "default", None) if packet is not None else None


def _dtype_slot(op) -> tuple[int, bool] | None:
    """(position, keyword-only) of the op's `dtype` argument, or None."""
    for position, argument in enumerate(op._schema.arguments):
        if argument.name == "dtype":
            return position, argument.kwarg_only
    return None


def _eligible(value, device_type: str) -> bool:
    return (isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype is not torch.float64
            and value.device.type == device_type)


def _cast(value, dtype: torch.dtype, device_type: str):
    if _eligible(value, device_type):
        return value if value.dtype is dtype else value.to(dtype)
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(item, dtype, device_type) for item in value)
    return value


def _named_dtype(args: tuple, kwargs: dict, slot: tuple[int, bool]):
    position, keyword_only = slot
    if keyword_only or len(args) <= position:
        return kwargs.get("dtype")
    return args[position]


def _widest(values, device_type: str, widest=None):
    for value in values:
        if _eligible(value, device_type):
            widest = value.dtype if widest is None else torch.promote_types(widest, value.dtype)
        elif isinstance(value, (list, tuple)):
            widest = _widest(value, device_type, widest)
    return widest


def make_kernel(op, kind_of: Callable[[], str | None], device_type: str, key, name: str = "") -> Callable:
    """An autocast kernel for `op` on the autocast dispatch key `key` (registered with_keyset): the cast
    of `kind_of()`'s kind, then the op below the autocast key; for no kind (None), the op as it is (a
    composite op by its decomposition, whose parts autocast on their own)."""
    slot = _dtype_slot(op)
    exclude = torch._C._ExcludeDispatchKeyGuard
    excluded = torch._C.DispatchKeySet(key)
    composite = torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd")

    def kernel(keyset, *args, **kwargs):
        kind = kind_of()
        if kind is None:
            if composite:  # its parts dispatch on their own, autocast with their own kinds
                return op.decompose(*args, **kwargs)
            with exclude(excluded):
                return op(*args, **kwargs)
        if kind == REFUSED:
            raise RuntimeError(REFUSALS.get(name) or f"{name} is refused under autocast")
        if kind == LOWER or kind == FLOAT32 or kind == PROMOTE:
            if kind == PROMOTE:
                dtype = _widest((*args, *kwargs.values()), device_type)
            else:
                dtype = torch.get_autocast_dtype(device_type) if kind == LOWER else torch.float32
            if dtype is not None:
                args = tuple(_cast(value, dtype, device_type) for value in args)
                if kwargs:
                    kwargs = {keyword: _cast(value, dtype, device_type) for keyword, value in kwargs.items()}
        elif kind == FLOAT32_UNLESS_DTYPE and slot is not None and args and _eligible(args[0], device_type) \
                and _named_dtype(args, kwargs, slot) is None:
            position, keyword_only = slot
            if keyword_only or len(args) <= position:
                kwargs = {**kwargs, "dtype": torch.float32}
            else:
                args = (*args[:position], torch.float32, *args[position + 1:])
        with exclude(excluded):
            return op(*args, **kwargs)

    return kernel
