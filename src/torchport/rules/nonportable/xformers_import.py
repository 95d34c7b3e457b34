"""TP503: imports of xformers."""

from __future__ import annotations

from torchport.rules.base import Severity
from torchport.rules.patterns import ImportRule

__all__ = ["XformersImport"]


class XformersImport(ImportRule):
    """xformers memory-efficient kernels are CUDA-only.

    **What it does**: finds imports of xformers.

    **Why it matters**: xformers ships CUDA kernels; its attention ops fail to import or run elsewhere.

    **Example**:

        import xformers.ops as xops

    **Use instead**: `torch.nn.functional.scaled_dot_product_attention`.

    **Fix safety**: no automatic fix: the replacement changes the code's structure.
    """

    code = "TP503"
    name = "xformers-import"
    message = "xformers memory-efficient kernels are CUDA-only"
    fix_title = "Use torch.nn.functional.scaled_dot_product_attention"
    severity = Severity.ERROR
    triggers = (b"xformers",)
    packages = frozenset({"xformers"})
    VALID = ("import torch.nn.functional as F\n",)
    INVALID = ("import xformers.ops as xops\n", "from xformers.ops import memory_efficient_attention\n")
