"""TP507: `torch.utils.cpp_extension.load` with `.cu` sources, `load_inline(cuda_sources=...)`."""

from __future__ import annotations

import ast

from torchport.rules.base import PythonRule, Severity
from torchport.rules.context import PythonContext, keyword_argument

__all__ = ["CppExtensionCudaSources"]

_LOADERS = {"torch.utils.cpp_extension.load", "torch.utils.cpp_extension.load_inline"}


class CppExtensionCudaSources(PythonRule):
    """A JIT-built extension with CUDA sources.

    **What it does**: finds `torch.utils.cpp_extension.load(...)` whose sources include `.cu` files
    and `load_inline(..., cuda_sources=...)`.

    **Why it matters**: nvcc is needed to build it and an NVIDIA GPU to run it; no other target
    can use the kernel.

    **Example**:

        ops = load(name="ops", sources=["ops.cpp", "ops_kernel.cu"])

    **Use instead**: a PyTorch implementation of the op (or a custom op with per-device kernels
    registered through `torch.library`).

    **Fix safety**: no automatic fix.
    """

    code = "TP507"
    name = "cpp-extension-cuda-sources"
    message = "C++ extension built from CUDA sources"
    fix_title = "Provide a PyTorch (or torch.library per-device) implementation of the op"
    severity = Severity.ERROR
    triggers = (b".cu'", b'.cu"', b".cuh'", b'.cuh"', b"cuda_sources")
    node_types = (ast.Call,)
    VALID = ("from torch.utils.cpp_extension import load\nops = load(name='ops', sources=['ops.cpp'])\n",)
    INVALID = (
        "from torch.utils.cpp_extension import load\nops = load(name='ops', sources=['a.cpp', 'k.cu'])\n",
        "from torch.utils.cpp_extension import load_inline\nops = load_inline('ops', cpp_sources=c, cuda_sources=k)\n",
    )

    def check(self, node: ast.Call, context: PythonContext) -> None:
        if context.called(node) not in _LOADERS:
            return
        if keyword_argument(node, "cuda_sources") is not None:
            context.report(self, node)
            return
        for inner in ast.walk(node):
            if isinstance(inner, ast.Constant) and isinstance(inner.value, str) and inner.value.endswith((".cu", ".cuh")):
                context.report(self, node)
                return
