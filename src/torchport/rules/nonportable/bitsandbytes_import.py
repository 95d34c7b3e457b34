"""TP505: imports of bitsandbytes."""

from __future__ import annotations

from torchport.rules.base import Severity
from torchport.rules.patterns import ImportRule

__all__ = ["BitsandbytesImport"]


class BitsandbytesImport(ImportRule):
    """bitsandbytes quantisation kernels target CUDA.

    **What it does**: finds imports of bitsandbytes.

    **Why it matters**: bitsandbytes 8-bit optimizers and 4/8-bit layers run on CUDA (other backends partially, in preview); Neuron, XLA and Ascend are not supported.

    **Example**:

        import bitsandbytes as bnb

    **Use instead**: torchao quantisation or the target vendor's quantisation tooling; `torch.optim.AdamW` for the optimizer.

    **Fix safety**: no automatic fix: the replacement changes the code's structure.
    """

    code = "TP505"
    name = "bitsandbytes-import"
    message = "bitsandbytes quantisation kernels target CUDA"
    fix_title = "Use torchao or the target's own quantisation"
    severity = Severity.ERROR
    triggers = (b"bitsandbytes",)
    packages = frozenset({"bitsandbytes"})
    VALID = ("import torch\n",)
    INVALID = ("import bitsandbytes as bnb\n", "from bitsandbytes.optim import AdamW8bit\n")
