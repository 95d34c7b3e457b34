"""TP115: `torch.cuda.current_device()`."""

from __future__ import annotations

import ast

from torchport.fix import neutral
from torchport.rules.base import Example, Fix, FixSafety, Severity
from torchport.rules.context import PythonContext
from torchport.rules.patterns import CallRule, guarded_by_availability

__all__ = ["CudaCurrentDevice"]


class CudaCurrentDevice(CallRule):
    """`torch.cuda.current_device()` raises without CUDA.

    **What it does**: finds calls of `torch.cuda.current_device()`.

    **Why it matters**: used to build device ids for DDP or to place buffers; fatal off CUDA.

    **Example**:

        index = torch.cuda.current_device()

    **Use instead**: `torch.accelerator.current_device_index()`.

    **Fix safety**: safe: `torch.accelerator.current_device_index()`, identical on CUDA; without an
    accelerator it would raise, so the fix reads 0 there (the index of the one CPU device).
    """

    code = "TP115"
    name = "cuda-current-device"
    message = "torch.cuda.current_device() raises without CUDA"
    fix_title = "Use torch.accelerator.current_device_index()"
    severity = Severity.ERROR
    fix_safety = FixSafety.SAFE
    triggers = (b"current_device",)
    callees = frozenset({"torch.cuda.current_device"})
    VALID = ("import torch\ni = torch.accelerator.current_device_index()\n",)
    INVALID = (
        Example(
            "import torch\ni = torch.cuda.current_device()\n",
            fixed="import torch\ni = (torch.accelerator.current_device_index() if torch.accelerator.is_available() "
            "else 0)\n",
        ),
    )

    def report_call(self, node: ast.Call, name: str, context: PythonContext) -> None:
        if guarded_by_availability(node, context):
            return  # the fix's own form, or the one it writes for torch < 2.6
        if node.args or node.keywords:
            context.report(self, node)
            return
        prefix, needs_import = context.torch_prefix()
        replacement = neutral.when_available(prefix, f"{prefix}.accelerator.current_device_index()", "0")
        context.report(self, node, fix=Fix(FixSafety.SAFE, replacement=replacement, needs_torch_import=needs_import))
