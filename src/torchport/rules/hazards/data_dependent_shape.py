"""TP403: operations whose output shape depends on tensor values."""

from __future__ import annotations

import ast

from torchport.rules.base import PythonRule, Severity
from torchport.rules.context import PythonContext

__all__ = ["DataDependentShape"]

_METHODS = {"nonzero", "masked_select", "unique", "unique_consecutive", "argwhere"}
_MASK_NAMES = ("mask", "keep", "valid", "selected")


class DataDependentShape(PythonRule):
    """Data-dependent output shapes break static-shape compilers.

    **What it does**: finds `nonzero`, `masked_select`, `unique`, `unique_consecutive`,
    `argwhere`, one-argument `torch.where(cond)` and boolean-mask indexing (`x[x > 0]`,
    `x[mask]`).

    **Why it matters**: Neuron rejects them under compilation (static shapes only); XLA
    recompiles for every distinct result size. Among the issues Neuron users hit most.

    **Example**:

        positives = scores[scores > 0]

    **Use instead**: fixed-shape forms: `torch.where(mask, x, 0)`, multiplying by the mask, or
    `nonzero(..., size=k)`-style padding.

    **Fix safety**: no automatic fix.

    Severity per target: follows the profile fact 'data-dependent shapes': unsupported error, fallback warning, native off.
    """

    code = "TP403"
    name = "data-dependent-shape"
    message = "Output shape depends on tensor values (static-shape targets refuse or recompile)"
    fix_title = "Use a fixed-shape form: torch.where(mask, x, 0) or multiply by the mask"
    severity = Severity.OFF
    target_severity = Severity.per_fact(
        "data-dependent shapes", {"unsupported": Severity.ERROR, "fallback": Severity.WARNING}
    )
    triggers = (
        b"nonzero(", b"masked_select(", b"unique(", b"unique_consecutive(", b"argwhere(", b"where(",
        b"mask]", b"keep]", b"valid]", b"selected]",
    )
    trigger_patterns = (rb"\[[^\]\n]*(?:[<>]|==|!=)",)
    node_types = (ast.Call, ast.Subscript)
    VALID = (
        "import torch\ny = torch.where(mask, x, 0)\n",
        "y = x[1:3]\n",
        "y = x[index]\n",
    )
    INVALID = (
        "import torch\nidx = torch.nonzero(x)\n",
        "y = x.masked_select(m)\n",
        "pos = scores[scores > 0]\n",
        "y = x[mask]\n",
        "import torch\nrows = torch.where(x > 0)\n",
    )

    def check(self, node: ast.AST, context: PythonContext) -> None:
        if isinstance(node, ast.Subscript):
            index = node.slice
            if isinstance(index, ast.Compare) and isinstance(node.ctx, ast.Load):
                context.report(self, node)
            elif isinstance(index, ast.Name) and index.id.lower().endswith(_MASK_NAMES) and isinstance(node.ctx, ast.Load):
                context.report(self, node)
            return
        function = node.func
        if not isinstance(function, ast.Attribute):
            return
        if function.attr in _METHODS:
            name = context.qualified_name(function)
            if name is None or name.startswith("torch."):
                context.report(self, node)
        elif function.attr == "where" and len(node.args) == 1 and not node.keywords:
            if context.qualified_name(function) == "torch.where":
                context.report(self, node)
