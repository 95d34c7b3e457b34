"""TP501: imports of Triton (`triton`, `triton.language`)."""

from __future__ import annotations

from torchport.rules.base import Severity
from torchport.rules.patterns import ImportRule

__all__ = ["TritonKernel"]


class TritonKernel(ImportRule):
    """Triton kernels compile for NVIDIA (and AMD) GPUs only.

    **What it does**: finds imports of Triton (`triton`, `triton.language`).

    **Why it matters**: Triton kernels have no backend on Neuron, XLA, MPS or Ascend; the code must be routed to a PyTorch op or a vendor kernel.

    **Example**:

        import triton.language as tl

    **Use instead**: the equivalent PyTorch ops (torch.compile generates kernels per backend), or a target-specific kernel behind a device check.

    **Fix safety**: no automatic fix: the replacement changes the code's structure.
    """

    code = "TP501"
    name = "triton-kernel"
    message = "Triton kernels compile for NVIDIA (and AMD) GPUs only"
    fix_title = "Replace the Triton kernel with PyTorch ops or a per-target kernel"
    severity = Severity.ERROR
    triggers = (b"triton",)
    packages = frozenset({"triton"})
    VALID = ("import torch\ny = torch.nn.functional.relu(x)\n",)
    INVALID = ("import triton\n", "import triton.language as tl\n")
