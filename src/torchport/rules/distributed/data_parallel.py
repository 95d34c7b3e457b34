"""TP303: `torch.nn.DataParallel`."""

from __future__ import annotations

from torchport.rules.base import Severity
from torchport.rules.patterns import CallRule

__all__ = ["DataParallelWrapper"]


class DataParallelWrapper(CallRule):
    """`nn.DataParallel` is single-process multi-GPU, CUDA only.

    **What it does**: finds `torch.nn.DataParallel(...)`.

    **Why it matters**: it only scatters over CUDA devices, and is usually followed by `.cuda()`
    (idiom I5); PyTorch recommends DDP instead, which works on every backend.

    **Example**:

        model = torch.nn.DataParallel(model).cuda()

    **Use instead**: `DistributedDataParallel` with `dist.get_default_backend_for_device`.

    **Fix safety**: no automatic fix: moving to DistributedDataParallel changes how the
    program is launched (torchrun) and how it batches.
    """

    code = "TP303"
    name = "data-parallel"
    message = "nn.DataParallel scatters over CUDA devices only"
    fix_title = "Use DistributedDataParallel"
    severity = Severity.WARNING
    triggers = (b"DataParallel",)
    callees = frozenset({"torch.nn.DataParallel", "torch.nn.parallel.DataParallel"})
    VALID = ("from torch.nn.parallel import DistributedDataParallel as DDP\nm = DDP(model)\n",)
    INVALID = ("import torch\nmodel = torch.nn.DataParallel(model)\n", "from torch import nn\nm = nn.DataParallel(m)\n")
