"""TP112: `assert torch.cuda.is_available()`."""

from __future__ import annotations

import ast

from torchport.rules.base import PythonRule, Severity
from torchport.rules.context import PythonContext

__all__ = ["AssertCudaAvailable"]

_CHECKS = {"torch.cuda.is_available", "torch.cuda.device_count"}


class AssertCudaAvailable(PythonRule):
    """An assertion that refuses to run without CUDA (idiom I5).

    **What it does**: finds `assert` statements whose test calls `torch.cuda.is_available()` or
    `torch.cuda.device_count()`.

    **Why it matters**: the program stops at start-up on every other machine, even where it
    would run fine on another accelerator.

    **Example**:

        assert torch.cuda.is_available(), "GPU required"

    **Use instead**: `assert torch.accelerator.is_available(), "an accelerator is required"`.

    **Fix safety**: no automatic fix: whether CPU should be accepted is the author's call.
    """

    code = "TP112"
    name = "assert-cuda-available"
    message = "Assertion requires CUDA and stops the program elsewhere"
    fix_title = "Assert torch.accelerator.is_available() instead (or drop the assertion)"
    severity = Severity.ERROR
    triggers = (b"is_available", b"device_count")
    node_types = (ast.Assert,)
    VALID = (
        "import torch\nassert torch.accelerator.is_available()\n",
        "assert x > 0\n",
    )
    INVALID = (
        "import torch\nassert torch.cuda.is_available(), 'need a GPU'\n",
        "import torch\nassert torch.cuda.device_count() >= 2\n",
    )

    def check(self, node: ast.Assert, context: PythonContext) -> None:
        for inner in ast.walk(node.test):
            if isinstance(inner, ast.Call) and context.called(inner) in _CHECKS:
                context.report(self, node)
                return
