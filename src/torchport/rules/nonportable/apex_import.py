"""TP504: imports of NVIDIA apex."""

from __future__ import annotations

from torchport.rules.base import Severity
from torchport.rules.patterns import ImportRule

__all__ = ["ApexImport"]


class ApexImport(ImportRule):
    """NVIDIA apex is CUDA-only.

    **What it does**: finds imports of NVIDIA apex.

    **Why it matters**: apex (amp, FusedAdam, FusedLayerNorm) builds CUDA extensions and has been superseded by upstream PyTorch.

    **Example**:

        from apex import amp

    **Use instead**: `torch.amp`, `torch.optim.AdamW(fused=True)`, `torch.nn.LayerNorm`.

    **Fix safety**: no automatic fix: the replacement changes the code's structure.
    """

    code = "TP504"
    name = "apex-import"
    message = "NVIDIA apex is CUDA-only"
    fix_title = "Use torch.amp, fused torch.optim optimizers and torch.nn layers"
    severity = Severity.ERROR
    triggers = (b"apex",)
    packages = frozenset({"apex"})
    VALID = ("import torch\nopt = torch.optim.AdamW(p, fused=True)\n",)
    INVALID = ("from apex import amp\n", "from apex.optimizers import FusedAdam\n")
