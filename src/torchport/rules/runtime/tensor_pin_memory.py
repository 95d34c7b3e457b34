"""TP214: `tensor.pin_memory()`."""

from __future__ import annotations

import ast

from torchport.rules.base import PythonRule, Severity
from torchport.rules.context import PythonContext

__all__ = ["TensorPinMemory"]


class TensorPinMemory(PythonRule):
    """`.pin_memory()` on a tensor raises without an accelerator.

    **What it does**: finds calls of the `.pin_memory()` method.

    **Why it matters**: fatal on CPU-only machines; custom collate functions and prefetchers call
    it unconditionally.

    **Example**:

        batch = batch.pin_memory()

    **Use instead**: `batch.pin_memory() if torch.accelerator.is_available() else batch`.

    **Fix safety**: no automatic fix: the receiver would be evaluated twice.
    """

    code = "TP214"
    name = "tensor-pin-memory"
    message = "tensor.pin_memory() raises without an accelerator"
    fix_title = "Pin only when torch.accelerator.is_available()"
    severity = Severity.WARNING
    target_severity = Severity.per_fact("accelerator", {False: Severity.ERROR})
    triggers = (b".pin_memory(",)
    node_types = (ast.Call,)
    VALID = ("loader = DataLoader(ds, pin_memory=flag)\n",)
    INVALID = ("batch = batch.pin_memory()\n",)

    def check(self, node: ast.Call, context: PythonContext) -> None:
        function = node.func
        if isinstance(function, ast.Attribute) and function.attr == "pin_memory" and not node.args:
            context.report(self, node)
