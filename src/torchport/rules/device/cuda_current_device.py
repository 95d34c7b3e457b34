"""TP115: `torch.cuda.current_device()`."""

from __future__ import annotations

from torchport.rules.base import Example, FixSafety, Severity
from torchport.rules.patterns import CallRule

__all__ = ["CudaCurrentDevice"]


class CudaCurrentDevice(CallRule):
    """`torch.cuda.current_device()` raises without CUDA.

    **What it does**: finds calls of `torch.cuda.current_device()`.

    **Why it matters**: used to build device ids for DDP or to place buffers; fatal off CUDA.

    **Example**:

        index = torch.cuda.current_device()

    **Use instead**: `torch.accelerator.current_device_index()`.

    **Fix safety**: safe: identical on CUDA, and both raise where no accelerator exists.
    """

    code = "TP115"
    name = "cuda-current-device"
    message = "torch.cuda.current_device() raises without CUDA"
    fix_title = "Use torch.accelerator.current_device_index()"
    severity = Severity.ERROR
    fix_safety = FixSafety.SAFE
    triggers = (b"current_device",)
    callees = frozenset({"torch.cuda.current_device"})
    rename_to = {"torch.cuda.current_device": "accelerator.current_device_index"}
    VALID = ("import torch\ni = torch.accelerator.current_device_index()\n",)
    INVALID = (
        Example(
            "import torch\ni = torch.cuda.current_device()\n",
            fixed="import torch\ni = torch.accelerator.current_device_index()\n",
        ),
    )
