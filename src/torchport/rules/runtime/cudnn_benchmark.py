"""TP211: `torch.backends.cudnn.benchmark = True`."""

from __future__ import annotations

from torchport.rules.base import Severity
from torchport.rules.patterns import AssignmentRule

__all__ = ["CudnnBenchmark"]


class CudnnBenchmark(AssignmentRule):
    """cuDNN autotuning switch: harmless, and useless, off CUDA.

    **What it does**: finds assignments to `torch.backends.cudnn.benchmark`.

    **Why it matters**: nothing breaks, but nothing is tuned on other devices either; it marks
    the code as tuned for one vendor. Reported for the inventory.

    **Example**:

        torch.backends.cudnn.benchmark = True

    **Use instead**: keep it if the code still targets CUDA too, and look at the target's own
    tuning (e.g. `torch.compile`).

    **Fix safety**: no automatic fix: the flag is harmless elsewhere; whether the target has an
    equivalent autotuner is a tuning decision.
    """

    code = "TP211"
    name = "cudnn-benchmark"
    message = "torch.backends.cudnn.benchmark only tunes cuDNN"
    fix_title = "Keep for CUDA, and tune the target with its own means (torch.compile)"
    severity = Severity.INFO
    triggers = (b"benchmark =", b"benchmark=")
    targets = frozenset({"torch.backends.cudnn.benchmark"})
    VALID = ("import torch\nbenchmark = True\n",)
    INVALID = ("import torch\ntorch.backends.cudnn.benchmark = True\n",)
