"""TP113: `torch.cuda.device_count()`."""

from __future__ import annotations

from torchport.rules.base import Example, FixSafety, Severity
from torchport.rules.patterns import CallRule

__all__ = ["CudaDeviceCount"]


class CudaDeviceCount(CallRule):
    """`torch.cuda.device_count()` counts NVIDIA devices only.

    **What it does**: finds calls of `torch.cuda.device_count()`.

    **Why it matters**: it returns 0 on other accelerators, so world sizes, `DataParallel`
    decisions and batch splits fall back to CPU logic.

    **Example**:

        world_size = torch.cuda.device_count()

    **Use instead**: `torch.accelerator.device_count()`.

    **Fix safety**: unsafe. Same answer on CUDA and CPU-only machines; on another accelerator the
    count becomes non-zero and CUDA-only code behind it may run.
    """

    code = "TP113"
    name = "cuda-device-count"
    message = "torch.cuda.device_count() is 0 on every non-CUDA accelerator"
    fix_title = "Use torch.accelerator.device_count()"
    severity = Severity.WARNING
    target_severity = Severity.per_fact("accelerator", {False: Severity.INFO})
    fix_safety = FixSafety.UNSAFE
    triggers = (b"device_count",)
    callees = frozenset({"torch.cuda.device_count"})
    rename_to = {"torch.cuda.device_count": "accelerator.device_count"}
    VALID = ("import torch\nn = torch.accelerator.device_count()\n",)
    INVALID = (
        Example(
            "import torch\nn = torch.cuda.device_count()\n",
            fixed="import torch\nn = torch.accelerator.device_count()\n",
        ),
        "from torch import cuda\nn = cuda.device_count()\n",
    )
