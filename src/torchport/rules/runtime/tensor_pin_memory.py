"""TP214: `tensor.pin_memory()`."""

from __future__ import annotations

import ast

from torchport.fix import neutral
from torchport.rules.base import Example, Fix, FixSafety, PythonRule, Severity
from torchport.rules.context import PythonContext
from torchport.rules.patterns import guarded_by_availability

__all__ = ["TensorPinMemory"]

#: Factories that take `pin_memory=`: pinning a fresh tensor is asking them to make it pinned.
_FACTORIES = frozenset(
    f"torch.{name}"
    for name in ("empty", "zeros", "ones", "full", "rand", "randn", "randint", "randperm", "arange", "tensor")
)


class TensorPinMemory(PythonRule):
    """`.pin_memory()` on a tensor raises without an accelerator.

    **What it does**: finds calls of the `.pin_memory()` method.

    **Why it matters**: fatal on CPU-only machines; custom collate functions and prefetchers call
    it unconditionally.

    **Example**:

        batch = batch.pin_memory()

    **Use instead**: `batch.pin_memory() if torch.accelerator.is_available() else batch`.

    **Fix safety**: safe when the receiver is a name or an attribute (evaluating it twice is
    harmless): pinning happens only when there is an accelerator, so nothing changes on CUDA. A
    fresh tensor from a factory (`torch.randn(4, 32).pin_memory()`) is made pinned by the factory
    instead: `torch.randn(4, 32, pin_memory=torch.accelerator.is_available())`. Other receivers are
    reported only.
    """

    code = "TP214"
    name = "tensor-pin-memory"
    message = "tensor.pin_memory() raises without an accelerator"
    fix_title = "Pin only when torch.accelerator.is_available()"
    severity = Severity.WARNING
    target_severity = Severity.per_fact("accelerator", {False: Severity.ERROR})
    fix_safety = FixSafety.SAFE
    triggers = (b".pin_memory(",)
    node_types = (ast.Call,)
    VALID = (
        "loader = DataLoader(ds, pin_memory=flag)\n",
        "import torch\nbatch = batch.pin_memory() if torch.accelerator.is_available() else batch\n",
    )
    INVALID = (
        Example(
            "import torch\nbatch = batch.pin_memory()\n",
            fixed="import torch\nbatch = (batch.pin_memory() if torch.accelerator.is_available() else batch)\n",
        ),
        Example(
            "import torch\nbuffer = torch.empty(4, 8,).pin_memory()\n",
            fixed="import torch\nbuffer = torch.empty(4, 8, pin_memory=torch.accelerator.is_available())\n",
        ),
        Example("import torch\nbuffer = make().pin_memory()\n", count=1),
    )

    def check(self, node: ast.Call, context: PythonContext) -> None:
        function = node.func
        if not isinstance(function, ast.Attribute) or function.attr != "pin_memory" or node.args:
            return
        if guarded_by_availability(node, context):
            return
        fix = None
        if isinstance(function.value, (ast.Name, ast.Attribute)) and not node.keywords:
            prefix, needs_import = context.torch_prefix()
            receiver = context.segment(function.value)
            replacement = neutral.when_available(prefix, context.segment(node), receiver)
            fix = Fix(FixSafety.SAFE, replacement=replacement, needs_torch_import=needs_import)
        elif self._fresh(function.value, context) and not node.keywords:
            prefix, needs_import = context.torch_prefix()
            head = context.segment(function.value)[:-1].rstrip()
            separator = " " if head.endswith(("(", ",")) else ", "
            if head.endswith("("):
                separator = ""
            replacement = f"{head}{separator}pin_memory={neutral.IS_AVAILABLE.format(torch=prefix)})"
            fix = Fix(FixSafety.SAFE, replacement=replacement, needs_torch_import=needs_import)
        context.report(self, node, fix=fix)

    @staticmethod
    def _fresh(receiver: ast.AST, context: PythonContext) -> bool:
        """Whether `receiver` is a factory call that can make the tensor pinned itself."""
        return (
            isinstance(receiver, ast.Call)
            and context.called(receiver) in _FACTORIES
            and not any(keyword.arg in {"pin_memory", None} for keyword in receiver.keywords)
            and context.segment(receiver).endswith(")")
        )
