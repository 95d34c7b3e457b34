"""TP215: `tensor.is_cuda`."""

from __future__ import annotations

import ast

from torchport.rules.base import Example, Fix, FixSafety, PythonRule, Severity
from torchport.rules.context import PythonContext

__all__ = ["IsCudaAttribute"]

_NO_PARENTHESES = (ast.If, ast.While, ast.Assign, ast.keyword, ast.Call, ast.Return, ast.BoolOp, ast.Assert, ast.IfExp)


class IsCudaAttribute(PythonRule):
    """`.is_cuda` asks "CUDA?" where the code means "on an accelerator?".

    **What it does**: finds reads of the `.is_cuda` attribute.

    **Why it matters**: it is False on every other accelerator, so accelerator-only paths (pinned
    copies, fused kernels, autocast) silently switch off.

    **Example**:

        if x.is_cuda:
            x = x.half()

    **Use instead**: `x.device.type != "cpu"`.

    **Fix safety**: unsafe: the branch now also runs on other accelerators.
    """

    code = "TP215"
    name = "is-cuda-attribute"
    message = ".is_cuda is False on every non-CUDA accelerator"
    fix_title = "Use tensor.device.type != 'cpu'"
    severity = Severity.WARNING
    target_severity = Severity.per_fact("accelerator", {False: Severity.INFO})
    fix_safety = FixSafety.UNSAFE
    unsafe_reason = "the accelerator branch also runs on non-CUDA accelerators"
    triggers = (b".is_cuda",)
    node_types = (ast.Attribute,)
    VALID = ("if x.device.type != 'cpu':\n    pass\n",)
    INVALID = (
        Example("if x.is_cuda:\n    pass\n", fixed='if x.device.type != "cpu":\n    pass\n'),
        Example("flag = not x.is_cuda\n", fixed='flag = not (x.device.type != "cpu")\n'),
    )

    def check(self, node: ast.Attribute, context: PythonContext) -> None:
        if node.attr != "is_cuda" or not isinstance(node.ctx, ast.Load):
            return
        replacement = f'{context.segment(node.value)}.device.type != "cpu"'
        if not isinstance(context.parent(), _NO_PARENTHESES):
            replacement = f"({replacement})"
        context.report(self, node, fix=Fix(FixSafety.UNSAFE, replacement=replacement))
