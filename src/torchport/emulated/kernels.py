"""Direct PrivateUse1 kernels for every ATen op that has a CPU kernel.

Without them, ops with a generic composite implementation (most structured ops such as ``add`` and
``mul``) reach the emulated device as ``empty`` + ``add.out``: two host round trips instead of one,
and a different kernel from the CPU's (``native_layer_norm`` becomes ``native_batch_norm``), so results
would drift from the CPU's. Registering the same generic fallback as a direct kernel for each op
makes the emulated device run exactly the kernel the CPU would run, once.
"""

from __future__ import annotations

import torch

from torchport.emulated import pinned
from torchport.emulated.state import DEVICE_TYPE

__all__ = ["install", "install_device_paths", "EXCLUDED_OPS", "HOST_COMPOSITES"]

#: Ops that keep their composite path: the composite is what moves data between devices.
EXCLUDED_OPS = frozenset(
    {
        "aten::_to_copy",
        "aten::to",
        "aten::_copy_from",
        "aten::_copy_from_and_resize",
        "aten::copy_",
        "aten::set_",
        "aten::resize_",
        "aten::lift_fresh",
        "aten::_has_compatible_shallow_copy_type",
        "aten::is_pinned",
        "aten::_pin_memory",
        "aten::pin_memory",
        "aten::record_stream",
        "aten::_local_scalar_dense",
    }
)

_libraries: list = []


def _kernel_for(op, fallback):
    def kernel(*args, **kwargs):
        return fallback(op, *args, **kwargs)

    return kernel


#: Ops whose CPU kernel only rearranges metadata although the schema does not mark an alias.
_METADATA_ONLY = frozenset({"aten::_unsafe_view"})

_CPU_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)


def _is_view(op) -> bool:
    """True for ops whose every result is a read-only alias of an input (view, t, expand, ...)."""
    returns = op._schema.returns
    if not returns:
        return False
    for result in returns:
        info = result.alias_info
        if info is None or info.is_write:
            return False
    return not any(argument.alias_info is not None and argument.alias_info.is_write for argument in op._schema.arguments)


def _view_kernel_for(op):
    # The CPU kernel of a view op only computes sizes and strides and shares the input's storage
    # and dispatch keys, so it is correct on device tensors and skips the host round trip.
    redispatch = op.redispatch
    keys = _CPU_KEYS

    def kernel(*args, **kwargs):
        return redispatch(keys, *args, **kwargs)

    return kernel


def install() -> int:
    """Register a direct kernel for every CPU-backed ATen op; returns how many were registered."""
    from torchport.emulated.dispatch import fallback

    has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key
    library = torch.library.Library("aten", "IMPL")
    _libraries.append(library)
    count = 0
    for qualified in torch._C._dispatch_get_all_op_names():
        if not qualified.startswith("aten::") or not has_kernel(qualified, "CPU"):
            continue
        base_name, _, overload = qualified[len("aten::"):].partition(".")
        if f"aten::{base_name}" in EXCLUDED_OPS:
            continue
        packet = getattr(torch.ops.aten, base_name, None)
        if packet is None:
            continue
        op = getattr(packet, overload or "default", None)
        if op is None:
            continue
        kernel = _view_kernel_for(op) if _is_view(op) or qualified in _METADATA_ONLY else _kernel_for(op, fallback)
        library.impl(qualified[len("aten::"):], kernel, "PrivateUse1")
        count += 1
    library.impl("_has_compatible_shallow_copy_type", _compatible_shallow_copy, "PrivateUse1")
    install_device_paths(library)
    return count


def _compatible_shallow_copy(tensor: torch.Tensor, other: torch.Tensor) -> bool:
    # CUDA answers True for CPU <-> CUDA, so Module.to() keeps parameter objects (and tied
    # weights) instead of replacing them; PyTorch's check omits PrivateUse1, which would untie
    # weights such as GPT-2's embedding and output layer.
    dense = ("cpu", DEVICE_TYPE)
    return (
        tensor.layout == torch.strided
        and other.layout == torch.strided
        and tensor.device.type in dense
        and other.device.type in dense
    )


# -- ops PyTorch routes differently for non-CPU devices --------------------------------------------

#: Composite ops that pick a device-specific path (convolution_overrideable for unknown backends);
#: running them as one host op keeps the CPU's kernels and results. `convolution` itself keeps its
#: composite kernel, which calls `_convolution`: the op torch.jit.trace records (a host kernel at
#: `convolution` would hide the op from the tracer, whose graph then held the output as a constant).
HOST_COMPOSITES = ("convolution_backward", "_convolution")


def _fused_lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    # The fused LSTM cell accelerators use (RNN.cpp picks it for every non-CPU device); the CPU
    # has no kernel for it. Same math as the CUDA kernel: gates i, f, g, o, workspace for backward.
    gates = input_gates + hidden_gates
    if input_bias is not None:
        gates = gates + input_bias + hidden_bias
    input_gate, forget_gate, cell_gate, output_gate = gates.chunk(4, 1)
    input_gate = input_gate.sigmoid()
    forget_gate = forget_gate.sigmoid()
    cell_gate = cell_gate.tanh()
    output_gate = output_gate.sigmoid()
    cy = forget_gate * cx + input_gate * cell_gate
    hy = output_gate * cy.tanh()
    workspace = torch.cat([input_gate, forget_gate, cell_gate, output_gate], 1)
    return hy, cy, workspace


def _fused_lstm_cell_backward(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    input_gate, forget_gate, cell_gate, output_gate = workspace.chunk(4, 1)
    tanh_cy = cy.tanh()
    if grad_hy is None:
        grad_hy = torch.zeros_like(cy)
    if grad_cy is None:
        grad_cy = torch.zeros_like(cy)
    grad_output_gate = grad_hy * tanh_cy * output_gate * (1 - output_gate)
    grad_cell_total = grad_hy * output_gate * (1 - tanh_cy * tanh_cy) + grad_cy
    grad_input_gate = grad_cell_total * cell_gate * input_gate * (1 - input_gate)
    grad_forget_gate = grad_cell_total * cx * forget_gate * (1 - forget_gate)
    grad_cell_gate = grad_cell_total * input_gate * (1 - cell_gate * cell_gate)
    grad_gates = torch.cat([grad_input_gate, grad_forget_gate, grad_cell_gate, grad_output_gate], 1)
    grad_cx = grad_cell_total * forget_gate
    grad_bias = grad_gates.sum(0) if has_bias else None
    return grad_gates, grad_cx, grad_bias


def _fused_gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    # The fused GRU cell RNN.cpp picks for every non-CPU device. Same math and workspace layout as
    # the CUDA kernel: gates r, z, n; workspace [r, z, n, hx, hidden n-gate] for backward.
    if input_bias is not None:
        input_gates = input_gates + input_bias
        hidden_gates = hidden_gates + hidden_bias
    input_reset, input_update, input_new = input_gates.chunk(3, 1)
    hidden_reset, hidden_update, hidden_new = hidden_gates.chunk(3, 1)
    reset_gate = (input_reset + hidden_reset).sigmoid()
    update_gate = (input_update + hidden_update).sigmoid()
    new_gate = (input_new + reset_gate * hidden_new).tanh()
    hy = new_gate + update_gate * (hx - new_gate)
    workspace = torch.cat([reset_gate, update_gate, new_gate, hx, hidden_new], 1)
    return hy, workspace


def _fused_gru_cell_backward(grad_hy, workspace, has_bias):
    reset_gate, update_gate, new_gate, hx, hidden_new = workspace.chunk(5, 1)
    grad_hx = grad_hy * update_gate
    grad_update = grad_hy * (hx - new_gate) * update_gate * (1 - update_gate)
    grad_new = grad_hy * (1 - update_gate) * (1 - new_gate * new_gate)
    grad_hidden_new = grad_new * reset_gate
    grad_reset = grad_new * hidden_new * reset_gate * (1 - reset_gate)
    grad_input_gates = torch.cat([grad_reset, grad_update, grad_new], 1)
    grad_hidden_gates = torch.cat([grad_reset, grad_update, grad_hidden_new], 1)
    grad_input_bias = grad_input_gates.sum(0) if has_bias else None
    grad_hidden_bias = grad_hidden_gates.sum(0) if has_bias else None
    return grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias


def _host_kernel(op, function):
    """A PrivateUse1 kernel computing `function` on host views of its device arguments (one op for the census)."""
    from torchport.emulated.dispatch import account, op_info
    from torchport.emulated.storage import to_host, wrap_new

    def unwrap(value):
        return to_host(value) if isinstance(value, torch.Tensor) and value.device.type == DEVICE_TYPE else value

    def kernel(*args, **kwargs):
        host_args = [unwrap(value) for value in args]
        host_kwargs = {key: unwrap(value) for key, value in kwargs.items()}
        account(op_info(op), host_args, host_kwargs)
        results = function(*host_args, **host_kwargs)
        return tuple(wrap_new(value) if isinstance(value, torch.Tensor) else value for value in results)

    return kernel


def install_device_paths(library) -> None:
    """Kernels for ops whose generic path does not work or differs on a non-CPU device."""
    from torchport.emulated.dispatch import fallback

    for name in HOST_COMPOSITES:
        packet = getattr(torch.ops.aten, name)
        for overload in packet.overloads():
            op = getattr(packet, overload)
            qualified = name if overload == "default" else f"{name}.{overload}"
            library.impl(qualified, _kernel_for(op, fallback), "PrivateUse1")
    aten = torch.ops.aten
    for op, function in (
        (aten._thnn_fused_lstm_cell.default, _fused_lstm_cell),
        (aten._thnn_fused_lstm_cell_backward_impl.default, _fused_lstm_cell_backward),
        (aten._thnn_fused_gru_cell.default, _fused_gru_cell),
        (aten._thnn_fused_gru_cell_backward.default, _fused_gru_cell_backward),
    ):
        library.impl(op._schema.name.split("::")[1], _host_kernel(op, function), "PrivateUse1")
    library.impl("_to_copy", _to_copy, "PrivateUse1")
    pinned.install(library)


_to_copy_op = torch.ops.aten._to_copy.default


def _to_copy(tensor, **options):
    # A non-blocking copy from an accelerator to the host lands in pinned memory (on CUDA, and in
    # PyTorch's generic path for PrivateUse1), which a Python backend cannot allocate. The copy is
    # synchronous on the emulated device anyway, so it is made a blocking one into pageable memory;
    # everything else takes the generic path, as before.
    device = options.get("device")
    if options.get("non_blocking") and device is not None and torch.device(device).type == "cpu":
        options["non_blocking"] = False
    return _to_copy_op.redispatch(_CPU_KEYS, tensor, **options)
