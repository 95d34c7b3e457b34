"""TP114: `torch.cuda.set_device(i)`."""

from __future__ import annotations

import ast

from torchport.fix import neutral
from torchport.rules.base import Example, Fix, FixSafety, Severity
from torchport.rules.context import PythonContext
from torchport.rules.patterns import CallRule, guarded_by_availability

__all__ = ["CudaSetDevice"]


class CudaSetDevice(CallRule):
    """`torch.cuda.set_device` selects a CUDA device, and raises without CUDA.

    **What it does**: finds calls of `torch.cuda.set_device(...)`.

    **Why it matters**: DDP launch code calls it first thing; it fails on every other machine
    (14 sites in 7 of 15 projects).

    **Example**:

        torch.cuda.set_device(local_rank)

    **Use instead**: `torch.accelerator.set_device_index(local_rank)`.

    **Fix safety**: safe. The call becomes `torch.accelerator.set_device_index(i)`, made only when
    `torch.accelerator.is_available()`: identical on CUDA; on another accelerator it selects its
    device; without an accelerator there is no device to select and nothing happens.
    """

    code = "TP114"
    name = "cuda-set-device"
    message = "torch.cuda.set_device raises without CUDA"
    fix_title = "Use torch.accelerator.set_device_index(index)"
    severity = Severity.ERROR
    fix_safety = FixSafety.SAFE
    triggers = (b"set_device",)
    callees = frozenset({"torch.cuda.set_device"})
    VALID = (
        "import torch\ntorch.accelerator.set_device_index(rank)\n",
        "import torch\ntorch.cuda.set_device(rank) if torch.cuda.is_available() else None\n",
    )
    INVALID = (
        Example(
            "import torch\ntorch.cuda.set_device(rank)  # pick the GPU\n",
            fixed="import torch\ntorch.accelerator.set_device_index(rank) if torch.accelerator.is_available() "
            "else None  # pick the GPU\n",
        ),
        Example(
            "from torch.cuda import set_device\nset_device(0)\n",
            fixed="from torch.cuda import set_device\nimport torch\n\n"
            "torch.accelerator.set_device_index(0) if torch.accelerator.is_available() else None\n",
        ),
    )

    def report_call(self, node: ast.Call, name: str, context: PythonContext) -> None:
        if guarded_by_availability(node, context):
            return  # already guarded (the fix's own form, or the one it writes for torch < 2.6)
        prefix, needs_import = context.torch_prefix()
        arguments = ", ".join(context.segment(argument) for argument in [*node.args, *node.keywords])
        call = f"{prefix}.accelerator.set_device_index({arguments})"
        statement = isinstance(context.parent(), ast.Expr)
        replacement = neutral.when_available(prefix, call, "None", bare=statement)
        context.report(self, node, fix=Fix(FixSafety.SAFE, replacement=replacement, needs_torch_import=needs_import))
