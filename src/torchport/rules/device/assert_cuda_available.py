"""TP112: `assert torch.cuda.is_available()`."""

from __future__ import annotations

import ast

from torchport.fix import neutral
from torchport.rules.base import Example, Fix, FixSafety, PythonRule, Severity
from torchport.rules.context import PythonContext, string_value

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

    **Fix safety**: unsafe. `assert torch.cuda.is_available(), message` becomes a warning with the
    message, given only when `torch.accelerator.is_available()` is false: the program goes on, on
    the best device there is (the fixed code chooses it). Nothing changes on CUDA. An assertion on
    the device count (`>= 2`) asks for several devices: that requirement is the author's to keep,
    and is reported only.
    """

    code = "TP112"
    name = "assert-cuda-available"
    message = "Assertion requires CUDA and stops the program elsewhere"
    fix_title = "Assert torch.accelerator.is_available() instead (or drop the assertion)"
    severity = Severity.ERROR
    fix_safety = FixSafety.UNSAFE
    unsafe_reason = "without an accelerator the program warns and runs on the CPU instead of stopping"
    triggers = (b"is_available", b"device_count")
    node_types = (ast.Assert,)
    VALID = (
        "import torch\nassert wrap(model, [0] if torch.cuda.is_available() else None) is not None\n",
        "import torch\nassert torch.accelerator.is_available()\n",
        "assert x > 0\n",
    )
    INVALID = (
        Example(
            "import torch\nassert torch.cuda.is_available(), 'need a GPU'  # checked first\n",
            fixed="import torch\nimport warnings\n\nwarnings.warn('need a GPU (running on the CPU)') if not "
            "torch.accelerator.is_available() else None  # checked first\n",
        ),
        Example(
            "import torch\nassert torch.cuda.is_available()\n",
            fixed="import torch\nimport warnings\n\nwarnings.warn('no accelerator: running on the CPU') if not "
            "torch.accelerator.is_available() else None\n",
        ),
        "import torch\nassert torch.cuda.device_count() >= 2\n",
    )

    def check(self, node: ast.Assert, context: PythonContext) -> None:
        # a check that chooses between two values (`x if torch.cuda.is_available() else y`, the form
        # fixes write for torch < 2.6) is not a requirement
        choices = {id(inner) for branch in ast.walk(node.test) if isinstance(branch, ast.IfExp)
                   for inner in ast.walk(branch.test)}
        for inner in ast.walk(node.test):
            if isinstance(inner, ast.Call) and context.called(inner) in _CHECKS and id(inner) not in choices:
                context.report(self, node, fix=self._fix(node, context))
                return

    @staticmethod
    def _fix(node: ast.Assert, context: PythonContext) -> Fix | None:
        test = node.test
        if not (isinstance(test, ast.Call) and context.called(test) == "torch.cuda.is_available"):
            return None
        if node.msg is None:
            message = repr("no accelerator: running on the CPU")
        elif string_value(node.msg) is not None:
            message = repr(f"{string_value(node.msg)} (running on the CPU)")
        else:
            message = context.segment(node.msg)
        prefix, needs_import = context.torch_prefix()
        replacement = f"warnings.warn({message}) if not {neutral.IS_AVAILABLE.format(torch=prefix)} else None"
        return Fix(FixSafety.UNSAFE, replacement=replacement, statement=True, needs_torch_import=needs_import,
                   imports=("warnings",))
