"""TP204: CUDA streams."""

from __future__ import annotations

from torchport.rules.base import Severity
from torchport.rules.patterns import CallRule

__all__ = ["CudaStream"]


class CudaStream(CallRule):
    """CUDA streams (data prefetchers, overlap of copy and compute).

    **What it does**: finds `torch.cuda.Stream()`, `torch.cuda.current_stream()`,
    `torch.cuda.default_stream()` and `torch.cuda.stream(...)`.

    **Why it matters**: all raise without CUDA; a CUDA-stream data prefetcher is a CUDA-only
    branch with no fallback (idiom I5).

    **Example**:

        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            batch = batch.to(device, non_blocking=True)

    **Use instead**: `torch.Stream(device)` and `torch.accelerator.current_stream()` on
    accelerators; skip the stream on CPU.

    **Fix safety**: no automatic fix: a stream needs a device and a CPU path.
    """

    code = "TP204"
    name = "cuda-stream"
    message = "CUDA stream API raises without CUDA"
    fix_title = "Use torch.Stream / torch.accelerator.current_stream(), with a CPU path"
    severity = Severity.ERROR
    triggers = (b"Stream(", b"current_stream", b"default_stream", b".stream(")
    callees = frozenset(
        {"torch.cuda.Stream", "torch.cuda.current_stream", "torch.cuda.default_stream", "torch.cuda.stream"}
    )
    VALID = ("import torch\ns = torch.Stream(device)\n",)
    INVALID = (
        "import torch\ns = torch.cuda.Stream()\n",
        "import torch\nwith torch.cuda.stream(s):\n    pass\n",
        "from torch import cuda\ncuda.current_stream().wait_stream(s)\n",
    )
