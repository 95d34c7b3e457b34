"""TP218: `torch.cuda.is_initialized()`."""

from __future__ import annotations

from torchport.rules.base import Example, FixSafety, Severity
from torchport.rules.patterns import CallRule

__all__ = ["CudaIsInitialized"]


class CudaIsInitialized(CallRule):
    """`torch.cuda.is_initialized()` answers only for CUDA.

    **What it does**: finds calls of `torch.cuda.is_initialized()`.

    **Why it matters**: on every other device it is False, so code that waits for the device to
    be set up, or reports that it is, takes its "not yet" branch forever.

    **Example**:

        assert torch.cuda.is_initialized()

    **Use instead**: `torch.get_device_module().is_initialized()`: the accelerator's own answer,
    or the CPU's (always initialised).

    **Fix safety**: safe: `torch.get_device_module()` is `torch.cuda` on CUDA, the same call there.
    """

    code = "TP218"
    name = "cuda-is-initialized"
    message = "torch.cuda.is_initialized() is False on every other device"
    fix_title = "Use torch.get_device_module().is_initialized()"
    severity = Severity.WARNING
    fix_safety = FixSafety.SAFE
    triggers = (b"is_initialized",)
    callees = frozenset({"torch.cuda.is_initialized"})
    rename_to = {"torch.cuda.is_initialized": "get_device_module().is_initialized"}
    VALID = (
        "import torch\nok = torch.get_device_module().is_initialized()\n",
        "import torch.distributed as dist\nok = dist.is_initialized()\n",
    )
    INVALID = (
        Example(
            "import torch\nready = torch.cuda.is_initialized()\n",
            fixed="import torch\nready = torch.get_device_module().is_initialized()\n",
        ),
    )
