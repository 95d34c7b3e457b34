"""TP114: `torch.cuda.set_device(i)`."""

from __future__ import annotations

from torchport.rules.base import Example, FixSafety, Severity
from torchport.rules.patterns import CallRule

__all__ = ["CudaSetDevice"]


class CudaSetDevice(CallRule):
    """`torch.cuda.set_device` selects a CUDA device, and raises without CUDA.

    **What it does**: finds calls of `torch.cuda.set_device(...)`.

    **Why it matters**: DDP launch code calls it first thing; it fails on every other machine
    (14 sites in 7 of 15 projects).

    **Example**:

        torch.cuda.set_device(local_rank)

    **Use instead**: `torch.accelerator.set_device_index(local_rank)`.

    **Fix safety**: safe. Identical on CUDA; both raise on a machine without an accelerator; on
    another accelerator the new call selects its device.
    """

    code = "TP114"
    name = "cuda-set-device"
    message = "torch.cuda.set_device raises without CUDA"
    fix_title = "Use torch.accelerator.set_device_index(index)"
    severity = Severity.ERROR
    fix_safety = FixSafety.SAFE
    triggers = (b"set_device",)
    callees = frozenset({"torch.cuda.set_device"})
    rename_to = {"torch.cuda.set_device": "accelerator.set_device_index"}
    VALID = ("import torch\ntorch.accelerator.set_device_index(rank)\n",)
    INVALID = (
        Example(
            "import torch\ntorch.cuda.set_device(rank)  # pick the GPU\n",
            fixed="import torch\ntorch.accelerator.set_device_index(rank)  # pick the GPU\n",
        ),
        Example(
            "from torch.cuda import set_device\nset_device(0)\n",
            fixed="from torch.cuda import set_device\nimport torch\n\ntorch.accelerator.set_device_index(0)\n",
        ),
    )
