"""TP508: `CUDAExtension` in setup.py."""

from __future__ import annotations

from torchport.rules.base import Severity
from torchport.rules.patterns import CallRule

__all__ = ["CudaExtensionSetup"]


class CudaExtensionSetup(CallRule):
    """A package that builds CUDA kernels at install time.

    **What it does**: finds `torch.utils.cpp_extension.CUDAExtension(...)` (typically in setup.py).

    **Why it matters**: installation needs nvcc and the CUDA toolkit; the built kernels run only
    on NVIDIA GPUs.

    **Example**:

        ext_modules=[CUDAExtension("ops", ["ops.cpp", "kernel.cu"])]

    **Use instead**: `CppExtension` with a PyTorch fallback, and build the CUDA part optionally.

    **Fix safety**: no automatic fix.
    """

    code = "TP508"
    name = "cuda-extension-setup"
    message = "CUDAExtension needs nvcc to install and an NVIDIA GPU to run"
    fix_title = "Make the CUDA extension optional and ship a PyTorch fallback"
    severity = Severity.ERROR
    triggers = (b"CUDAExtension",)
    callees = frozenset({"torch.utils.cpp_extension.CUDAExtension"})
    VALID = ("from torch.utils.cpp_extension import CppExtension\next = CppExtension('ops', ['ops.cpp'])\n",)
    INVALID = (
        "from torch.utils.cpp_extension import CUDAExtension\next = CUDAExtension('ops', ['k.cu'])\n",
    )
