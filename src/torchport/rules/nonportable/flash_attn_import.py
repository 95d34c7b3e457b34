"""TP502: imports of flash-attn (`flash_attn`)."""

from __future__ import annotations

from torchport.rules.base import Severity
from torchport.rules.patterns import ImportRule

__all__ = ["FlashAttnImport"]


class FlashAttnImport(ImportRule):
    """flash-attn is a CUDA-only package.

    **What it does**: finds imports of flash-attn (`flash_attn`).

    **Why it matters**: flash-attn builds CUDA kernels only; 29 call sites in the survey. PyTorch's own SDPA picks a fused kernel on every backend.

    **Example**:

        from flash_attn import flash_attn_func

    **Use instead**: `torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)`.

    **Fix safety**: no automatic fix: the replacement changes the code's structure.
    """

    code = "TP502"
    name = "flash-attn-import"
    message = "flash-attn is a CUDA-only package"
    fix_title = "Use torch.nn.functional.scaled_dot_product_attention"
    severity = Severity.ERROR
    triggers = (b"flash_attn",)
    packages = frozenset({"flash_attn"})
    VALID = ("import torch.nn.functional as F\no = F.scaled_dot_product_attention(q, k, v)\n",)
    INVALID = ("from flash_attn import flash_attn_func\n", "import flash_attn.bert_padding\n")
