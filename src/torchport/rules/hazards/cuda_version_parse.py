"""TP406: `torch.version.cuda`."""

from __future__ import annotations

from torchport.rules.base import Severity
from torchport.rules.patterns import AttributeRule

__all__ = ["CudaVersionParse"]


class CudaVersionParse(AttributeRule):
    """`torch.version.cuda` is None on ROCm, CPU and every other backend.

    **What it does**: finds reads of `torch.version.cuda`.

    **Why it matters**: code that parses it (`float(torch.version.cuda)`,
    `torch.version.cuda.split('.')`) crashes with a TypeError/AttributeError off CUDA, including
    on AMD GPUs, where the device is still called 'cuda'.

    **Example**:

        major = int(torch.version.cuda.split(".")[0])

    **Use instead**: test features (`torch.accelerator.is_available()`,
    `torch.backends.cuda.is_flash_attention_available()`), not version strings; guard for None.

    **Fix safety**: no automatic fix.
    """

    code = "TP406"
    name = "cuda-version-parse"
    message = "torch.version.cuda is None off CUDA (ROCm and CPU included)"
    fix_title = "Test for features instead of parsing torch.version.cuda (and handle None)"
    severity = Severity.ERROR
    triggers = (b"version.cuda",)
    attributes = frozenset({"torch.version.cuda"})
    VALID = ("import torch\nv = torch.version.hip\n", "import torch\nv = torch.__version__\n")
    INVALID = (
        "import torch\nmajor = int(torch.version.cuda.split('.')[0])\n",
        "from torch import version\nprint(version.cuda)\n",
    )
