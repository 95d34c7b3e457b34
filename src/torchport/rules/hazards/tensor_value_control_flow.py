"""TP405: Python control flow on tensor values."""

from __future__ import annotations

import ast

from torchport.rules.base import PythonRule, Severity
from torchport.rules.context import PythonContext

__all__ = ["TensorValueControlFlow"]

_REDUCTIONS = {"any", "all", "item", "equal", "allclose", "isnan", "isinf"}


class TensorValueControlFlow(PythonRule):
    """`if`/`while` on a tensor value forces a host sync and a graph break.

    **What it does**: finds `if`/`while` conditions that call `.any()`, `.all()`, `.item()`,
    `torch.equal`, `torch.allclose`, `torch.isnan(...)` and the like.

    **Why it matters**: the host must wait for the value; lazy and graph targets (XLA, Neuron)
    break the graph there and may compile each branch separately.

    **Example**:

        if torch.isnan(loss).any():
            raise FloatingPointError

    **Use instead**: tensor-valued control (`torch.where`), or check every N steps.

    **Fix safety**: no automatic fix.

    Severity per target: follows the profile fact 'execution': graph warning, otherwise off.
    """

    code = "TP405"
    name = "tensor-value-control-flow"
    message = "Control flow on a tensor value syncs the host and breaks graphs"
    fix_title = "Use torch.where / masks, or test the value every N steps"
    severity = Severity.OFF
    target_severity = Severity.per_fact("execution", {"graph": Severity.WARNING})
    triggers = (b".any(", b".all(", b".item(", b"equal(", b"allclose(", b"isnan(", b"isinf(")
    node_types = (ast.If, ast.While)
    VALID = ("if x > 0:\n    pass\n", "if any(flags):\n    pass\n")
    INVALID = (
        "import torch\nif torch.isnan(loss).any():\n    pass\n",
        "while (x > 0).all():\n    pass\n",
        "if loss.item() > 10:\n    pass\n",
    )

    def check(self, node: ast.If | ast.While, context: PythonContext) -> None:
        for inner in ast.walk(node.test):
            if not isinstance(inner, ast.Call) or not isinstance(inner.func, ast.Attribute):
                continue
            if inner.func.attr in _REDUCTIONS:
                name = context.qualified_name(inner.func)
                if name is None or name.startswith("torch."):
                    context.report(self, node.test)
                    return
