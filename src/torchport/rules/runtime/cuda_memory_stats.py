"""TP202: `torch.cuda.memory_allocated()` and the other memory statistics."""

from __future__ import annotations

import ast

from torchport.rules.base import Example, FixSafety, Severity
from torchport.rules.context import PythonContext
from torchport.rules.patterns import CallRule, guarded_by_availability, torch_fix

__all__ = ["CudaMemoryStats"]

_READERS = ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved")


class CudaMemoryStats(CallRule):
    """CUDA memory statistics read 0 on every other device.

    **What it does**: finds `torch.cuda.memory_allocated()`, `max_memory_allocated()`,
    `memory_reserved()`, `max_memory_reserved()` and `reset_peak_memory_stats()`.

    **Why it matters**: memory reports silently say 0 bytes on other accelerators, and
    `reset_peak_memory_stats()` raises without CUDA.

    **Example**:

        peak = torch.cuda.max_memory_allocated() / 2**30

    **Use instead**: `torch.accelerator.max_memory_allocated()` (and friends), which raise when
    there is no accelerator, so guard them with `torch.accelerator.is_available()`.

    **Fix safety**: safe for calls without arguments: the readers become
    `(torch.accelerator.X() if torch.accelerator.is_available() else 0)`, identical on CUDA and
    still 0 on CPU; `reset_peak_memory_stats()` becomes the `torch.accelerator` one, made only when
    there is an accelerator (it raises without one). Calls with a device argument are reported only.
    """

    code = "TP202"
    name = "cuda-memory-stats"
    message = "CUDA memory statistics are 0 (or raise) on other devices"
    fix_title = "Use torch.accelerator memory statistics, guarded by torch.accelerator.is_available()"
    severity = Severity.WARNING
    target_severity = Severity.per_fact("accelerator", {False: Severity.INFO})
    fix_safety = FixSafety.SAFE
    triggers = (b"memory_allocated", b"memory_reserved", b"reset_peak_memory_stats")
    callees = frozenset({*(f"torch.cuda.{name}" for name in _READERS), "torch.cuda.reset_peak_memory_stats"})
    VALID = ("import torch\npeak = torch.accelerator.max_memory_allocated()\n",)
    INVALID = (
        Example(
            "import torch\npeak = torch.cuda.max_memory_allocated() / 2**30\n",
            fixed="import torch\npeak = (torch.accelerator.max_memory_allocated() if "
            "torch.accelerator.is_available() else 0) / 2**30\n",
        ),
        Example(
            "import torch\ntorch.cuda.reset_peak_memory_stats()\n",
            fixed="import torch\ntorch.accelerator.reset_peak_memory_stats() if torch.accelerator.is_available() else None\n",
        ),
        "import torch\nused = torch.cuda.memory_allocated(device)\n",
    )

    def report_call(self, node: ast.Call, name: str, context: PythonContext) -> None:
        short = name.rsplit(".", 1)[1]
        if guarded_by_availability(node, context):
            return  # the fix's own form as written for torch < 2.6
        if node.args or node.keywords:
            context.report(self, node)
        elif short == "reset_peak_memory_stats":
            template = "{torch}.accelerator.reset_peak_memory_stats() if {torch}.accelerator.is_available() else None"
            if not isinstance(context.parent(), ast.Expr):
                template = f"({template})"
            context.report(self, node, fix=torch_fix(context, template))
        else:
            template = f"({{torch}}.accelerator.{short}() if {{torch}}.accelerator.is_available() else 0)"
            context.report(self, node, fix=torch_fix(context, template))
