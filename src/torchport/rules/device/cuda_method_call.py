"""TP102: `.cuda()` on tensors and modules."""

from __future__ import annotations

import ast

from torchport.rules.base import PythonRule, Severity
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

    **Fix safety**: no automatic fix; the fixer cannot know which device variable is in scope.
    """

    code = "TP102"
    name = "cuda-method-call"
    message = "'.cuda()' moves data to CUDA only"
    fix_title = "Replace '.cuda()' with '.to(device)' using a resolved device"
    severity = Severity.ERROR
    triggers = (b".cuda(",)
    node_types = (ast.Call,)
    VALID = (
        "import torch\nx = torch.ones(2).to(device)\n",
        "import torch\nok = torch.cuda.is_available()\n",
        "x = x.cuda(gpu)\n",
    )
    INVALID = (
        "import torch\nmodel = Net().cuda()\n",
        "batch = batch.cuda(non_blocking=True)\n",
    )

    def check(self, node: ast.Call, context: PythonContext) -> None:
        function = node.func
        if not isinstance(function, ast.Attribute) or function.attr != "cuda" or node.args:
            return
        if context.qualified_name(function) is not None:
            return
        context.report(self, node)
