"""TP407: compute-capability checks."""

from __future__ import annotations

import ast

from torchport.rules.base import Example, FixSafety, PythonRule, Severity
from torchport.rules.context import PythonContext
from torchport.rules.device.cuda_device_properties import cuda_guarded, cuda_or

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

    **Fix safety**: unsafe. What the capability gates (bf16, TF32, a kernel) should be asked of the
    target as a feature, which differs per use; the fix keeps the CUDA answer where CUDA is
    available and answers capability `(0, 0)` (major and minor 0) elsewhere, so every "sm_80 or
    newer" gate takes its conservative branch (fp16 instead of bf16, no TF32) instead of raising.
    Asking for the feature (`torch.cuda.is_bf16_supported()` and its counterparts) stays a
    better change for a person to make.
    """

    code = "TP407"
    name = "compute-capability-check"
    message = "Compute-capability check raises off CUDA and misfires on ROCm"
    fix_title = "Test the feature you need instead of the compute capability"
    severity = Severity.ERROR
    fix_safety = FixSafety.UNSAFE
    unsafe_reason = "without CUDA the compute capability reads (0, 0), so capability gates take their oldest branch"
    triggers = (b"get_device_capability", b"get_device_properties")
    node_types = (ast.Call, ast.Attribute)
    VALID = (
        "import torch\nok = torch.cuda.is_bf16_supported()\n",
        "import torch\nc = torch.cuda.get_device_capability() if torch.cuda.is_available() else (0, 0)\n",
    )
    INVALID = (
        Example(
            "import torch\nuse_bf16 = torch.cuda.get_device_capability()[0] >= 8\n",
            fixed="import torch\nuse_bf16 = (torch.cuda.get_device_capability() if torch.cuda.is_available() "
            "else (0, 0))[0] >= 8\n",
        ),
        Example(
            "import torch\nmajor = torch.cuda.get_device_properties(0).major\n",
            fixed="import torch\nmajor = (torch.cuda.get_device_properties(0).major if torch.cuda.is_available() "
            "else 0)\n",
        ),
    )

    def check(self, node: ast.AST, context: PythonContext) -> None:
        if isinstance(node, ast.Call):
            if context.called(node) == "torch.cuda.get_device_capability" and not cuda_guarded(node, context):
                context.report(self, node, fix=cuda_or(node, "(0, 0)", context))
            return
        value = node.value
        if node.attr in {"major", "minor"} and isinstance(value, ast.Call) and isinstance(node.ctx, ast.Load):
            if context.called(value) == "torch.cuda.get_device_properties" and not cuda_guarded(node, context):
                context.report(self, node, fix=cuda_or(node, "0", context))
