"""TP506: imports of CuPy, PyCUDA, pynvml and cuda-python."""

from __future__ import annotations

from torchport.rules.base import Severity
from torchport.rules.patterns import ImportRule

__all__ = ["CupyImport"]


class CupyImport(ImportRule):
    """CuPy / PyCUDA / NVML bindings need an NVIDIA driver.

    **What it does**: finds imports of CuPy, PyCUDA, pynvml and cuda-python.

    **Why it matters**: CuPy and PyCUDA arrays live in CUDA memory, NVML and cuda-python talk to the NVIDIA driver; none of them exists on other machines.

    **Example**:

        import cupy as cp

    **Use instead**: torch tensors (or NumPy on the host); `torch.accelerator` memory statistics instead of NVML.

    **Fix safety**: no automatic fix: the replacement changes the code's structure.
    """

    code = "TP506"
    name = "cupy-import"
    message = "CuPy / PyCUDA / NVML bindings need an NVIDIA driver"
    fix_title = "Use torch tensors / NumPy, and torch.accelerator for device queries"
    severity = Severity.ERROR
    triggers = (b"cupy", b"pycuda", b"pynvml", b"from cuda", b"import cuda")
    packages = frozenset({"cupy", "pycuda", "pynvml", "cuda"})
    VALID = ("import numpy as np\n",)
    INVALID = ("import cupy as cp\n", "from pynvml import nvmlInit\n")
