"""TP206: `torch.cuda.nvtx` ranges."""

from __future__ import annotations

from torchport.rules.base import Severity
from torchport.rules.patterns import CallRule

__all__ = ["CudaNvtx"]


class CudaNvtx(CallRule):
    """NVTX profiler ranges exist only for NVIDIA tools.

    **What it does**: finds `torch.cuda.nvtx.range_push/range_pop/range/mark`.

    **Why it matters**: they raise without CUDA, and no other profiler reads them.

    **Example**:

        torch.cuda.nvtx.range_push("forward")

    **Use instead**: `torch.profiler.record_function("forward")`, which every profiler backend
    understands.

    **Fix safety**: no automatic fix (push/pop pairs become a `with` block).
    """

    code = "TP206"
    name = "cuda-nvtx"
    message = "torch.cuda.nvtx ranges raise without CUDA"
    fix_title = "Use torch.profiler.record_function(name)"
    severity = Severity.ERROR
    triggers = (b"nvtx", b"range_push", b"range_pop")
    callees = frozenset({f"torch.cuda.nvtx.{name}" for name in ("range_push", "range_pop", "range", "mark")})
    VALID = ("import torch\nwith torch.profiler.record_function('fwd'):\n    pass\n",)
    INVALID = ("import torch\ntorch.cuda.nvtx.range_push('fwd')\n", "from torch.cuda import nvtx\nnvtx.range_pop()\n")
