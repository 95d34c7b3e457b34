"""TP401: float64 tensors and `.double()`."""

from __future__ import annotations

import ast

from torchport.rules.base import PythonRule, Severity
from torchport.rules.context import PythonContext

__all__ = ["Float64Tensor"]

_DTYPES = {"torch.float64", "torch.double", "torch.complex128", "torch.cdouble"}


class Float64Tensor(PythonRule):
    """float64 is refused or silently downcast on most accelerators.

    **What it does**: finds `torch.float64` / `torch.double` (and complex128) and `.double()`.

    **Why it matters**: Neuron downcasts every float64 to float32; MPS refuses float64; XLA on TPU
    emulates it slowly; results then differ from the CUDA/CPU reference.

    **Example**:

        weights = torch.zeros(n, dtype=torch.float64)

    **Use instead**: float32 (with compensated sums where precision matters), or keep the float64
    part on the CPU.

    **Fix safety**: no automatic fix: precision is a modelling decision.

    Severity per target: follows the profile fact 'float64': refused or downcast error, native off.
    """

    code = "TP401"
    name = "float64-tensor"
    message = "float64 is downcast or refused on this target"
    fix_title = "Use float32, or keep the float64 computation on the CPU"
    severity = Severity.WARNING
    target_severity = Severity.per_fact(
        "float64", {"refused": Severity.ERROR, "downcast": Severity.ERROR, "native": Severity.OFF}
    )
    triggers = (b"float64", b".double", b"complex128", b"cdouble")
    node_types = (ast.Attribute, ast.Call)
    VALID = ("import torch\nx = torch.zeros(3, dtype=torch.float32)\n", "import numpy as np\nx = np.float64(1)\n")
    INVALID = (
        "import torch\nx = torch.zeros(3, dtype=torch.float64)\n",
        "y = x.double()\n",
        "import torch as th\nt = th.tensor([1.0], dtype=th.double)\n",
    )

    def check(self, node: ast.AST, context: PythonContext) -> None:
        if isinstance(node, ast.Attribute):
            if node.attr in {"float64", "double", "complex128", "cdouble"} and context.qualified_name(node) in _DTYPES:
                context.report(self, node)
            return
        function = node.func
        if isinstance(function, ast.Attribute) and function.attr == "double" and not node.args:
            if context.qualified_name(function) is None:
                context.report(self, node)
