"""TP407: compute-capability checks."""

from __future__ import annotations

import ast

from torchport.rules.base import PythonRule, Severity
from torchport.rules.context import PythonContext

__all__ = ["ComputeCapabilityCheck"]


class ComputeCapabilityCheck(PythonRule):
    """Feature gates on NVIDIA compute capability.

    **What it does**: finds `torch.cuda.get_device_capability()` and `.major` / `.minor` read
    from `torch.cuda.get_device_properties(...)`.

    **Why it matters**: it raises without CUDA, and on ROCm it returns gfx numbers, so "Ampere or
    newer" checks misfire and bf16 or fused attention get switched off (or on) wrongly.

    **Example**:

        use_bf16 = torch.cuda.get_device_capability()[0] >= 8

    **Use instead**: ask for the feature: `torch.cuda.is_bf16_supported()` on CUDA, the target
    profile elsewhere, or just try and fall back.

    **Fix safety**: no automatic fix: what the capability gates (bf16, TF32, a kernel)
    must be asked of the target as a feature, which differs per use.
    """

    code = "TP407"
    name = "compute-capability-check"
    message = "Compute-capability check raises off CUDA and misfires on ROCm"
    fix_title = "Test the feature you need instead of the compute capability"
    severity = Severity.ERROR
    triggers = (b"get_device_capability", b"get_device_properties")
    node_types = (ast.Call, ast.Attribute)
    VALID = ("import torch\nok = torch.cuda.is_bf16_supported()\n",)
    INVALID = (
        "import torch\nuse_bf16 = torch.cuda.get_device_capability()[0] >= 8\n",
        "import torch\nmajor = torch.cuda.get_device_properties(0).major\n",
    )

    def check(self, node: ast.AST, context: PythonContext) -> None:
        if isinstance(node, ast.Call):
            if context.called(node) == "torch.cuda.get_device_capability":
                context.report(self, node)
            return
        value = node.value
        if node.attr in {"major", "minor"} and isinstance(value, ast.Call):
            if context.called(value) == "torch.cuda.get_device_properties":
                context.report(self, node)
