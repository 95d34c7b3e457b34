"""TP402: int64 values that a target downcasts."""

from __future__ import annotations

import ast

from torchport.rules.base import PythonRule, Severity
from torchport.rules.context import PythonContext

__all__ = ["Int64IndexMath"]

_DTYPES = {"torch.int64", "torch.long"}


class Int64IndexMath(PythonRule):
    """int64 tensors (large index math) are downcast to int32 on Neuron.

    **What it does**: finds `torch.int64` / `torch.long` and `.long()`.

    **Why it matters**: NeuronCore v2 downcasts INT64 to INT32, and integer matmul and scatter-add
    run in FP32 (exact only up to 2^24): large index arithmetic, hashing and token ids past 16M
    go silently wrong.

    **Example**:

        index = (row * width + column).long()

    **Use instead**: keep index math in ranges int32/fp32 represent exactly, or run it on the
    CPU; on Trn2 compile with `--native-int64`.

    **Fix safety**: no automatic fix.

    Severity per target: follows the profile fact 'int64': downcast warning, otherwise off.
    """

    code = "TP402"
    name = "int64-index-math"
    message = "int64 is downcast to int32 on this target"
    fix_title = "Keep index values within int32 range, or compute them on the CPU"
    severity = Severity.OFF
    target_severity = Severity.per_fact("int64", {"downcast": Severity.WARNING})
    triggers = (b"int64", b".long")
    node_types = (ast.Attribute, ast.Call)
    VALID = ("import torch\nx = torch.zeros(3, dtype=torch.int32)\n", "value = long_name\n")
    INVALID = ("import torch\nidx = torch.arange(n, dtype=torch.int64)\n", "ids = ids.long()\n")

    def check(self, node: ast.AST, context: PythonContext) -> None:
        if isinstance(node, ast.Attribute):
            if node.attr in {"int64", "long"} and context.qualified_name(node) in _DTYPES:
                context.report(self, node)
            return
        function = node.func
        if isinstance(function, ast.Attribute) and function.attr == "long" and not node.args:
            if context.qualified_name(function) is None:
                context.report(self, node)
