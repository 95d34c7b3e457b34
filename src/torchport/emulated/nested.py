"""Nested tensors (torch.nested, layout torch.strided) on the emulated device, computed by the CPU's kernels.

A nested device tensor is a real nested tensor whose buffer is a device tensor: its bytes are device
memory, its sizes, strides and offsets are PyTorch's own. Every op that reaches it (the
``NestedTensorPrivateUse1`` key) runs the CPU's nested kernel on a host nested view of the same
bytes, and nested results come back as nested device tensors. This is the path nn.TransformerEncoder
takes in eval mode with a padding mask (``_nested_tensor_from_mask``, the fused encoder layer,
``to_padded_tensor``), so it computes exactly what the CPU computes.
"""

from __future__ import annotations

import torch

from torchport.emulated.state import DEVICE_TYPE

__all__ = ["host_view", "to_device", "install"]


def _flat(storage: torch.UntypedStorage, dtype: torch.dtype, device=None) -> torch.Tensor:
    return torch.empty(0, dtype=dtype, device=device).set_(storage)


_NESTED_CPU_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.NestedTensorCPU)
#: Ops that only read a nested tensor's metadata: the CPU's kernels read it on any device.
_METADATA_OPS = tuple(
    getattr(torch.ops.aten, name).default
    for name in ("_nested_tensor_size", "_nested_tensor_strides", "_nested_tensor_storage_offsets")
)


def _metadata(nested: torch.Tensor) -> tuple:
    return tuple(op.redispatch(_NESTED_CPU_KEYS, nested) for op in _METADATA_OPS)


def host_view(nested: torch.Tensor) -> torch.Tensor:
    """A CPU nested tensor viewing the bytes of a nested device tensor."""
    from torchport.emulated.storage import block_of

    buffer = _flat(block_of(nested).storage, nested.dtype)
    return torch._nested_view_from_buffer(buffer, *_metadata(nested))


def to_device(nested: torch.Tensor) -> torch.Tensor:
    """A nested device tensor owning the bytes of a CPU nested tensor (counted as device memory)."""
    from torchport.emulated.storage import wrap_new

    buffer = wrap_new(_flat(nested.untyped_storage(), nested.dtype))
    return torch._nested_view_from_buffer(
        buffer, nested._nested_tensor_size(), nested._nested_tensor_strides(), nested._nested_tensor_storage_offsets()
    )


def _to_host(value):
    if isinstance(value, torch.Tensor) and value.device.type == DEVICE_TYPE:
        if value.is_nested:
            return host_view(value)
        from torchport.emulated.storage import to_host

        return to_host(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_to_host(item) for item in value)
    return value


def _to_device(value):
    if isinstance(value, torch.Tensor) and value.device.type == "cpu":
        if value.is_nested:
            return to_device(value)
        from torchport.emulated.storage import wrap_new

        return wrap_new(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_to_device(item) for item in value)
    return value


def _fallback(op, *args, **kwargs):
    from torchport.emulated.dispatch import account, op_info
    from torchport.emulated.errors import not_emulated

    if op in _METADATA_OPS:
        return op.redispatch(_NESTED_CPU_KEYS, *args, **kwargs)
    info = op_info(op)
    if any(argument.alias_info is not None and argument.alias_info.is_write for argument in op._schema.arguments):
        raise not_emulated(info.name, "in-place and out= ops on nested tensors (only functional ones are emulated)")
    host_args = [_to_host(value) for value in args]
    host_kwargs = {key: (torch.device("cpu") if key == "device" else _to_host(value)) for key, value in kwargs.items()}
    account(info, host_args, host_kwargs)
    result = op(*host_args, **host_kwargs)
    requested = kwargs.get("device")
    if requested is not None and torch.device(requested).type == "cpu":
        return result  # a copy to the host (nested.cpu(), .to("cpu"))
    return _to_device(result)


def install(libraries: list) -> None:
    """Serve every op on a nested device tensor with the CPU's nested kernel."""
    library = torch.library.Library("_", "IMPL")
    library.fallback(_fallback, "NestedTensorPrivateUse1")
    libraries.append(library)
