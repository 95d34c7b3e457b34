"""TP205: `torch.cuda.Event` timing."""

from __future__ import annotations

from torchport.rules.base import Severity
from torchport.rules.patterns import CallRule

__all__ = ["CudaEvent"]


class CudaEvent(CallRule):
    """CUDA events used for timing or synchronisation.

    **What it does**: finds `torch.cuda.Event(...)`.

    **Why it matters**: raises without CUDA; timing code built on it has no CPU path.

    **Example**:

        start = torch.cuda.Event(enable_timing=True)

    **Use instead**: `torch.Event(device, enable_timing=True)` on accelerators, or
    `time.perf_counter()` around a synchronize.

    **Fix safety**: no automatic fix: CPU events cannot time (`elapsed_time` raises), so a benchmark
    needs another clock (`time.perf_counter()` after a synchronize), a choice for a person.
    """

    code = "TP205"
    name = "cuda-event"
    message = "torch.cuda.Event raises without CUDA"
    fix_title = "Use torch.Event(device, ...) or time.perf_counter()"
    severity = Severity.ERROR
    triggers = (b"Event(",)
    callees = frozenset({"torch.cuda.Event"})
    VALID = ("import torch\ne = torch.Event(device, enable_timing=True)\n", "import threading\ne = threading.Event()\n")
    INVALID = ("import torch\nstart = torch.cuda.Event(enable_timing=True)\n",)
