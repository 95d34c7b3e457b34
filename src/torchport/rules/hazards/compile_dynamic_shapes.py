"""TP408: `torch.compile(dynamic=True)` and `mark_dynamic`."""

from __future__ import annotations

import ast

from torchport.rules.base import PythonRule, Severity
from torchport.rules.context import PythonContext, keyword_argument

__all__ = ["CompileDynamicShapes"]


class CompileDynamicShapes(PythonRule):
    """Dynamic-shape compilation, which static-shape targets reject.

    **What it does**: finds `torch.compile(..., dynamic=True)` and `torch._dynamo.mark_dynamic(...)`.

    **Why it matters**: `torch.compile(backend="neuron")` rejects `dynamic=True` (static shapes
    only: every new shape recompiles); XLA recompiles per shape too.

    **Example**:

        model = torch.compile(model, dynamic=True)

    **Use instead**: bucket inputs to a few fixed shapes (pad sequences) and compile with
    `dynamic=False`.

    **Fix safety**: no automatic fix.

    Severity per target: follows the profile fact 'dynamic shapes': rejected error, recompiles warning, supported off.
    """

    code = "TP408"
    name = "compile-dynamic-shapes"
    message = "Dynamic-shape compilation is rejected on static-shape targets"
    fix_title = "Bucket inputs to fixed shapes and compile with dynamic=False"
    severity = Severity.OFF
    target_severity = Severity.per_fact(
        "dynamic shapes", {"rejected": Severity.ERROR, "recompiles": Severity.WARNING}
    )
    triggers = (b"dynamic=True", b"dynamic = True", b"mark_dynamic")
    node_types = (ast.Call,)
    VALID = ("import torch\nm = torch.compile(model, dynamic=False)\n", "import torch\nm = torch.compile(model)\n")
    INVALID = (
        "import torch\nm = torch.compile(model, dynamic=True)\n",
        "import torch\ntorch._dynamo.mark_dynamic(x, 0)\n",
    )

    def check(self, node: ast.Call, context: PythonContext) -> None:
        name = context.called(node)
        if name == "torch._dynamo.mark_dynamic":
            context.report(self, node)
        elif name == "torch.compile":
            keyword = keyword_argument(node, "dynamic")
            if keyword and isinstance(keyword.value, ast.Constant) and keyword.value.value is True:
                context.report(self, keyword)
