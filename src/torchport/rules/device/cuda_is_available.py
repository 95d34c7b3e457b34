"""TP107: `torch.cuda.is_available()` as a general "is there an accelerator?" check."""

from __future__ import annotations

import ast

from torchport.rules.base import Example, FixSafety, PythonRule, Severity
from torchport.rules.context import PythonContext
from torchport.rules.device.cuda_availability_ternary import is_cuda_available_call
from torchport.rules.patterns import torch_fix

__all__ = ["CudaIsAvailable"]


class CudaIsAvailable(PythonRule):
    """`torch.cuda.is_available()` answers only for NVIDIA (and ROCm) GPUs.

    **What it does**: finds calls of `torch.cuda.is_available()` however it was imported, except
    inside the availability ternary (TP106) and `assert` (TP112), which have their own rules.

    **Why it matters**: on every other accelerator it returns False, so the code takes its CPU
    path. Libraries branch on it too, so patching it process-wide breaks them (the survey's
    lesson 1): the application's own check has to change. Found in 15 of 15 projects.

    **Example**:

        if torch.cuda.is_available():
            model.to("cuda")

    **Use instead**: `torch.accelerator.is_available()`.

    **Fix safety**: unsafe. Identical on CUDA and CPU-only machines, but on another accelerator the
    branch now runs, and it may still hold CUDA-only calls.
    """

    code = "TP107"
    name = "cuda-is-available"
    message = "torch.cuda.is_available() is false on every non-CUDA accelerator"
    fix_title = "Use torch.accelerator.is_available()"
    severity = Severity.WARNING
    target_severity = Severity.per_fact("accelerator", {False: Severity.INFO})
    fix_safety = FixSafety.UNSAFE
    unsafe_reason = "the check is also true on non-CUDA accelerators, whose code path then runs"
    triggers = (b"is_available",)
    node_types = (ast.Call,)
    VALID = (
        "import torch\nok = torch.accelerator.is_available()\n",
        "import torch\nd = 'cuda' if torch.cuda.is_available() else 'cpu'\n",
        "import torch\nok = torch.backends.mps.is_available()\n",
    )
    INVALID = (
        Example(
            "import torch\nif torch.cuda.is_available():\n    pass\n",
            fixed="import torch\nif torch.accelerator.is_available():\n    pass\n",
        ),
        "import torch as th\nuse = th.cuda.is_available() and flag\n",
        "from torch import cuda\nuse = cuda.is_available()\n",
        "from torch.cuda import is_available as has_gpu\nuse = has_gpu()\n",
    )

    def check(self, node: ast.Call, context: PythonContext) -> None:
        if not is_cuda_available_call(node, context):
            return
        parent = context.parent()
        if isinstance(parent, ast.IfExp) and parent.test is node:
            return
        if isinstance(parent, ast.Assert):
            return
        fix = torch_fix(context, "{torch}.accelerator.is_available", FixSafety.UNSAFE)
        context.report(self, node.func, fix=fix)
