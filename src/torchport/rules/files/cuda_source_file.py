"""TP601: `.cu` / `.cuh` source files."""

from __future__ import annotations

import re
from typing import Iterator

from torchport.rules.base import Example, Finding, Severity, TextContext, TextRule

__all__ = ["CudaSourceFile"]

_KERNEL = re.compile(r"__global__")


class CudaSourceFile(TextRule):
    """A CUDA C++ source file in the tree.

    **What it does**: reports every `.cu` / `.cuh` file once, counting its `__global__` kernels.

    **Why it matters**: CUDA kernels need nvcc and an NVIDIA GPU; each one needs a PyTorch or
    per-target replacement before the project can leave CUDA.

    **Example**: `csrc/fused_softmax_kernel.cu`

    **Use instead**: PyTorch ops (torch.compile generates fused kernels per backend) or a custom
    op with per-device kernels registered through `torch.library`.

    **Fix safety**: no automatic fix.
    """

    code = "TP601"
    name = "cuda-source-file"
    message = "CUDA source file"
    fix_title = "Replace its kernels with PyTorch ops or per-device torch.library kernels"
    severity = Severity.ERROR
    file_kinds = ("cuda",)
    VALID = (Example("int add(int a, int b) { return a + b; }\n", filename="add.cpp"),)
    INVALID = (Example("__global__ void k(float* x) { x[0] = 1; }\n", filename="kernel.cu"),)

    def check_text(self, context: TextContext) -> Iterator[Finding]:
        kernels = len(_KERNEL.findall(context.text))
        first = context.text.splitlines()[0].strip() if context.text.strip() else ""
        yield Finding(
            self.code, context.path, 1, 0, 1, 0,
            f"{self.message} ({kernels} __global__ kernel{'s' if kernels != 1 else ''})",
            source_line=first,
        )
