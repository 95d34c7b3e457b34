"""TP201: `torch.cuda.synchronize()`."""

from __future__ import annotations

from torchport.rules.base import Example, FixSafety, Severity
from torchport.rules.patterns import CallRule

__all__ = ["CudaSynchronize"]


class CudaSynchronize(CallRule):
    """`torch.cuda.synchronize()` raises without CUDA (idiom I5 in benchmarks and timers).

    **What it does**: finds calls of `torch.cuda.synchronize(...)`.

    **Why it matters**: timing loops and benchmarks call it unconditionally and crash on every
    other machine (26 sites in 5 of 15 projects). `torch.accelerator.synchronize()` is no
    drop-in either: it also raises when there is no accelerator.

    **Example**:

        torch.cuda.synchronize()
        elapsed = time.perf_counter() - start

    **Use instead**: `torch.get_device_module().synchronize()`: the current accelerator's module,
    or `torch.cpu` (a no-op) when there is none.

    **Fix safety**: safe: the same call on CUDA; a no-op instead of a crash on CPU.
    """

    code = "TP201"
    name = "cuda-synchronize"
    message = "torch.cuda.synchronize() raises without CUDA"
    fix_title = "Use torch.get_device_module().synchronize()"
    severity = Severity.ERROR
    fix_safety = FixSafety.SAFE
    triggers = (b"synchronize",)
    callees = frozenset({"torch.cuda.synchronize"})
    rename_to = {"torch.cuda.synchronize": "get_device_module().synchronize"}
    VALID = ("import torch\ntorch.get_device_module().synchronize()\n", "import torch\nstream.synchronize()\n")
    INVALID = (
        Example(
            "import torch\ntorch.cuda.synchronize()  # wait for kernels\n",
            fixed="import torch\ntorch.get_device_module().synchronize()  # wait for kernels\n",
        ),
        Example(
            "import torch as th\nth.cuda.synchronize(\n    device,\n)\n",
            fixed="import torch as th\nth.get_device_module().synchronize(\n    device,\n)\n",
        ),
    )
