"""TP102: `.cuda()` on tensors and modules."""

from __future__ import annotations

import ast

from torchport.fix import neutral
from torchport.rules.base import Example, Fix, FixSafety, PythonRule, Severity
from torchport.rules.context import PythonContext

__all__ = ["CudaMethodCall"]


class CudaMethodCall(PythonRule):
    """`.cuda()` moves a tensor or module to CUDA only.

    **What it does**: finds `x.cuda()` and `model.cuda(non_blocking=True)` (an explicit device
    ordinal such as `.cuda(gpu)` is TP108).

    **Why it matters**: `.cuda()` raises on every machine without an NVIDIA GPU.

    **Example**:

        model = Net().cuda()

    **Use instead**: `.to(device)` with a device resolved once, e.g.
    `torch.accelerator.current_accelerator() or torch.device("cpu")`.

    **Fix safety**: unsafe. `x.cuda()` becomes `x.to(<best available device>)`, keeping its
    keyword arguments: the current CUDA device on a CUDA machine (as `.cuda()` does), the local
    accelerator or the CPU elsewhere.
    """

    code = "TP102"
    name = "cuda-method-call"
    message = "'.cuda()' moves data to CUDA only"
    fix_title = "Replace '.cuda()' with '.to(device)' using a resolved device"
    severity = Severity.ERROR
    fix_safety = FixSafety.UNSAFE
    unsafe_reason = "data moves to the local accelerator or stays on the CPU instead of failing without CUDA"
    triggers = (b".cuda(",)
    node_types = (ast.Call,)
    VALID = (
        "import torch\nx = torch.ones(2).to(device)\n",
        "import torch\nok = torch.cuda.is_available()\n",
        "x = x.cuda(gpu)\n",
    )
    INVALID = (
        Example(
            "import torch\nmodel = Net().cuda()\n",
            fixed="import torch\nmodel = Net().to(torch.accelerator.current_accelerator() if "
            'torch.accelerator.is_available() else torch.device("cpu"))\n',
        ),
        "batch = batch.cuda(non_blocking=True)\n",
    )

    def check(self, node: ast.Call, context: PythonContext) -> None:
        function = node.func
        if not isinstance(function, ast.Attribute) or function.attr != "cuda" or node.args:
            return
        if context.qualified_name(function) is not None:
            return
        prefix, needs_import = context.torch_prefix()
        keywords = [keyword for keyword in node.keywords if keyword.arg != "device"]
        device_keyword = next((keyword for keyword in node.keywords if keyword.arg == "device"), None)
        # a storage (map_location=lambda storage, loc: storage.cuda()) takes the device by keyword only
        device = neutral.device(prefix, bare=True)
        if device_keyword is not None:  # .cuda(device=index)
            index = context.segment(device_keyword.value)
            device = f"{prefix}.device({neutral.device_type(prefix, bare=True)}, {index})"
        if any(isinstance(item, ast.Lambda) for item in context.stack):
            device = f"device={device}"
        arguments = [device, *(context.segment(keyword) for keyword in keywords)]
        replacement = f"{context.segment(function.value)}.to({', '.join(arguments)})"
        context.report(self, node, fix=Fix(FixSafety.UNSAFE, replacement=replacement, needs_torch_import=needs_import))
