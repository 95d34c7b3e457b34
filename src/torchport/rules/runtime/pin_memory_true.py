"""TP213: `pin_memory=True`."""

from __future__ import annotations

import ast

from torchport.rules.base import Example, FixSafety, PythonRule, Severity
from torchport.rules.context import PythonContext
from torchport.rules.patterns import torch_fix

__all__ = ["PinMemoryTrue"]


class PinMemoryTrue(PythonRule):
    """`pin_memory=True` assumes a device that can pin host memory.

    **What it does**: finds the keyword argument `pin_memory=True` (DataLoader, tensor factories).

    **Why it matters**: a DataLoader warns and a tensor factory raises without an accelerator
    (41 sites in 7 of 15 projects).

    **Example**:

        loader = DataLoader(dataset, batch_size=32, pin_memory=True)

    **Use instead**: `pin_memory=torch.accelerator.is_available()`.

    **Fix safety**: safe: still True with CUDA, False (no warning, same data) on CPU.
    """

    code = "TP213"
    name = "pin-memory-true"
    message = "pin_memory=True warns or raises without an accelerator"
    fix_title = "Use pin_memory=torch.accelerator.is_available()"
    severity = Severity.WARNING
    target_severity = {}
    fix_safety = FixSafety.SAFE
    triggers = (b"pin_memory=True", b"pin_memory = True")
    node_types = (ast.keyword,)
    VALID = (
        "import torch\nloader = DataLoader(ds, pin_memory=torch.accelerator.is_available())\n",
        "loader = DataLoader(ds, pin_memory=False)\n",
    )
    INVALID = (
        Example(
            "import torch\nloader = DataLoader(ds, batch_size=2, pin_memory=True)\n",
            fixed="import torch\nloader = DataLoader(ds, batch_size=2, pin_memory=torch.accelerator.is_available())\n",
        ),
    )

    def check(self, node: ast.keyword, context: PythonContext) -> None:
        if node.arg == "pin_memory" and isinstance(node.value, ast.Constant) and node.value.value is True:
            context.report(self, node.value, fix=torch_fix(context, "{torch}.accelerator.is_available()"))
