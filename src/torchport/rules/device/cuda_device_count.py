"""TP113: `torch.cuda.device_count()`."""

from __future__ import annotations

import ast

from torchport.rules.base import Example, Fix, FixSafety, Severity
from torchport.rules.context import PythonContext
from torchport.rules.patterns import CallRule

__all__ = ["CudaDeviceCount"]


class CudaDeviceCount(CallRule):
    """`torch.cuda.device_count()` counts NVIDIA devices only.

    **What it does**: finds calls of `torch.cuda.device_count()`.

    **Why it matters**: it returns 0 on other accelerators, so world sizes, `DataParallel`
    decisions and batch splits fall back to CPU logic.

    **Example**:

        world_size = torch.cuda.device_count()

    **Use instead**: `torch.accelerator.device_count()`, or `torch.accelerator.device_count() or 1`
    where the count sizes something (processes to spawn, shards, a log line): the CPU is one device.

    **Fix safety**: unsafe. Where the count is tested (`> 1`, `== 0`, `if n:`) it becomes
    `torch.accelerator.device_count()`: the same answer on CUDA and CPU-only machines. Where it is
    used as a number it becomes `(torch.accelerator.device_count() or 1)`, 1 without an accelerator,
    so `mp.spawn(nprocs=...)` starts one process and `range(n)` runs once. On another accelerator
    the count becomes non-zero and CUDA-only code behind it may run.
    """

    code = "TP113"
    name = "cuda-device-count"
    message = "torch.cuda.device_count() is 0 on every non-CUDA accelerator"
    fix_title = "Use torch.accelerator.device_count()"
    severity = Severity.WARNING
    target_severity = Severity.per_fact("accelerator", {False: Severity.INFO})
    fix_safety = FixSafety.UNSAFE
    unsafe_reason = "the count is the local accelerator's, and a count used as a number is 1 without one"
    triggers = (b"device_count",)
    callees = frozenset({"torch.cuda.device_count"})
    rename_to = {"torch.cuda.device_count": "accelerator.device_count"}
    VALID = ("import torch\nn = torch.accelerator.device_count()\n",)
    INVALID = (
        Example(
            "import torch\nn = torch.cuda.device_count()  # world size\n",
            fixed="import torch\nn = (torch.accelerator.device_count() or 1)  # world size\n",
        ),
        Example(
            "import torch\nif torch.cuda.device_count() > 1:\n    pass\n",
            fixed="import torch\nif torch.accelerator.device_count() > 1:\n    pass\n",
        ),
        "from torch import cuda\nn = cuda.device_count()\n",
    )

    def report_call(self, node: ast.Call, name: str, context: PythonContext) -> None:
        parent = context.parent()
        tested = isinstance(parent, (ast.Compare, ast.BoolOp, ast.UnaryOp)) or (
            isinstance(parent, (ast.If, ast.IfExp, ast.While, ast.Assert)) and parent.test is node
        )
        if tested or node.args or node.keywords:
            super().report_call(node, name, context)
            return
        prefix, needs_import = context.torch_prefix()
        replacement = f"({prefix}.accelerator.device_count() or 1)"
        context.report(self, node, fix=Fix(self.fix_safety, replacement=replacement, needs_torch_import=needs_import))
