"""TP206: `torch.cuda.nvtx` ranges."""

from __future__ import annotations

import ast

from torchport.rules.base import Example, Fix, FixSafety, Severity
from torchport.rules.context import PythonContext
from torchport.rules.patterns import CallRule

__all__ = ["CudaNvtx"]


class CudaNvtx(CallRule):
    """NVTX profiler ranges exist only for NVIDIA tools.

    **What it does**: finds `torch.cuda.nvtx.range_push/range_pop/range/mark`.

    **Why it matters**: they raise without CUDA ("NVTX functions not installed"), and no other
    profiler reads them.

    **Example**:

        torch.cuda.nvtx.range_push("forward")

    **Use instead**: `torch.profiler.record_function("forward")`, which every profiler backend
    understands.

    **Fix safety**: unsafe. `with torch.cuda.nvtx.range(name):` becomes `with
    torch.profiler.record_function(name):`, a range every profiler records (Nsight sees it under
    `torch.autograd.profiler.emit_nvtx()`, no longer without it). `range_push`, `range_pop` and
    `mark` pair up across statements, so turning them into `with` blocks is a change of structure
    left to a person: they are made only when `torch.cuda.is_available()`, as before on CUDA and
    skipped elsewhere.
    """

    code = "TP206"
    name = "cuda-nvtx"
    message = "torch.cuda.nvtx ranges raise without CUDA"
    fix_title = "Use torch.profiler.record_function(name)"
    severity = Severity.ERROR
    fix_safety = FixSafety.UNSAFE
    unsafe_reason = "NVTX ranges are profiler ranges (range) or only made on CUDA (push, pop, mark)"
    triggers = (b"nvtx", b"range_push", b"range_pop")
    callees = frozenset({f"torch.cuda.nvtx.{name}" for name in ("range_push", "range_pop", "range", "mark")})
    VALID = (
        "import torch\nwith torch.profiler.record_function('fwd'):\n    pass\n",
        "import torch\ntorch.cuda.nvtx.range_pop() if torch.cuda.is_available() else None\n",
    )
    INVALID = (
        Example(
            "import torch\ntorch.cuda.nvtx.range_push('fwd')  # forward\n",
            fixed="import torch\ntorch.cuda.nvtx.range_push('fwd') if torch.cuda.is_available() else None  # forward\n",
        ),
        Example(
            "from torch.cuda import nvtx\nnvtx.range_pop()\n",
            fixed="from torch.cuda import nvtx\nimport torch\n\n"
            "nvtx.range_pop() if torch.cuda.is_available() else None\n",
        ),
        Example(
            "import torch\nwith torch.cuda.nvtx.range(f'step {i}'):\n    pass\n",
            fixed="import torch\nwith torch.profiler.record_function(f'step {i}'):\n    pass\n",
        ),
    )

    def report_call(self, node: ast.Call, name: str, context: PythonContext) -> None:
        prefix, needs_import = context.torch_prefix()
        parent = context.parent()
        if name == "torch.cuda.nvtx.range":
            fix = Fix(FixSafety.UNSAFE, replacement=f"{prefix}.profiler.record_function", needs_torch_import=needs_import)
            context.report(self, node.func, fix=fix)
            return
        if isinstance(parent, ast.IfExp) and parent.body is node and "cuda.is_available" in context.segment(parent.test):
            return  # already made only on CUDA
        fix = None
        if isinstance(parent, ast.Expr):
            replacement = f"{context.segment(node)} if {prefix}.cuda.is_available() else None"
            fix = Fix(FixSafety.UNSAFE, replacement=replacement, needs_torch_import=needs_import)
        context.report(self, node, fix=fix)
