"""TP203: `torch.cuda.empty_cache()`, `manual_seed(_all)`: harmless, but CUDA-only."""

from __future__ import annotations

from torchport.rules.base import Severity
from torchport.rules.patterns import CallRule

__all__ = ["CudaHarmlessCalls"]


class CudaHarmlessCalls(CallRule):
    """CUDA housekeeping calls that do nothing off CUDA.

    **What it does**: finds `torch.cuda.empty_cache()`, `torch.cuda.manual_seed()` and
    `torch.cuda.manual_seed_all()`. (`torch.cuda.ipc_collect()` raises on a torch without CUDA:
    TP219 reports and fixes it.)

    **Why it matters**: they run without error elsewhere, but do nothing: another accelerator's
    random generator stays unseeded (runs stop being reproducible) and its cache is never freed.

    **Example**:

        torch.cuda.manual_seed_all(seed)

    **Use instead**: `torch.manual_seed(seed)` seeds every device; `torch.accelerator.empty_cache()`
    behind `torch.accelerator.is_available()`.

    **Fix safety**: no automatic fix: `torch.manual_seed` also reseeds the CPU generator, which
    changes the CPU random stream.
    """

    code = "TP203"
    name = "cuda-harmless-calls"
    message = "CUDA housekeeping call does nothing on other devices"
    fix_title = "Use torch.manual_seed / torch.accelerator.empty_cache() instead"
    severity = Severity.INFO
    triggers = (b"empty_cache", b"manual_seed")
    callees = frozenset({"torch.cuda.empty_cache", "torch.cuda.manual_seed", "torch.cuda.manual_seed_all"})
    VALID = ("import torch\ntorch.manual_seed(0)\n",)
    INVALID = (
        "import torch\ntorch.cuda.manual_seed_all(0)\n",
        "import torch\ntorch.cuda.empty_cache()\n",
    )
