"""TP216: `fused=` optimizer flags gated on CUDA."""

from __future__ import annotations

import ast

from torchport.rules.base import PythonRule, Severity
from torchport.rules.context import PythonContext
from torchport.rules.patterns import is_cuda_string

__all__ = ["FusedOptimizerGate"]


class FusedOptimizerGate(PythonRule):
    """Fused optimizers switched on only for CUDA.

    **What it does**: finds `fused=` arguments of `torch.optim` optimizers whose value tests for
    CUDA (`'cuda' in device`, `torch.cuda.is_available()`, `device.type == 'cuda'`).

    **Why it matters**: fused AdamW/Adam/SGD run on CPU (and other devices) since PyTorch 2.4; the
    CUDA gate throws away the speed-up there (32 sites in 3 of 15 projects).

    **Example**:

        optimizer = torch.optim.AdamW(params, lr=1e-3, fused="cuda" in device_type)

    **Use instead**: `fused=True` where the installed PyTorch supports the target.

    **Fix safety**: no automatic fix: support differs per optimizer and device.
    """

    code = "TP216"
    name = "fused-optimizer-gate"
    message = "Fused optimizer enabled only on CUDA"
    fix_title = "Enable fused=True where the target supports it (CPU does since 2.4)"
    severity = Severity.INFO
    triggers = (b"fused",)
    node_types = (ast.Call,)
    VALID = (
        "import torch\nopt = torch.optim.AdamW(params, fused=True)\n",
        "import torch\nopt = torch.optim.AdamW(params, fused=use_fused)\n",
    )
    INVALID = (
        "import torch\nopt = torch.optim.AdamW(params, fused='cuda' in device_type)\n",
        "import torch\nopt = torch.optim.Adam(params, fused=torch.cuda.is_available())\n",
    )

    def check(self, node: ast.Call, context: PythonContext) -> None:
        name = context.called(node)
        if not name or not name.startswith("torch.optim."):
            return
        for keyword in node.keywords:
            if keyword.arg == "fused" and self._mentions_cuda(keyword.value, context):
                context.report(self, keyword.value)

    @staticmethod
    def _mentions_cuda(value: ast.AST, context: PythonContext) -> bool:
        for inner in ast.walk(value):
            if is_cuda_string(inner):
                return True
            if isinstance(inner, ast.Call) and (context.called(inner) or "").startswith("torch.cuda."):
                return True
        return False
