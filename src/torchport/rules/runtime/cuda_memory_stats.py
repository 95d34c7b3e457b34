"""TP202: `torch.cuda.memory_allocated()` and the other memory statistics."""

from __future__ import annotations

import ast

from torchport.rules.base import Example, Fix, FixSafety, Severity
from torchport.rules.context import PythonContext
from torchport.rules.patterns import CallRule, guarded_by_availability, torch_fix

__all__ = ["CudaMemoryStats"]

_READERS = ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved")
# The housekeeping below raises without CUDA; TP219 (cuda_memory_housekeeping) reports it, and this
# rule's report_call fixes both.
#: Peak resets: the deprecated aliases reset the same peaks as `reset_peak_memory_stats`.
_RESETS = ("reset_peak_memory_stats", "reset_max_memory_allocated", "reset_max_memory_cached")
#: CUDA-only calls with no torch.accelerator counterpart: made on CUDA only, with the value the
#: program gets elsewhere.
_CUDA_ONLY = {"memory_summary": '""', "ipc_collect": "None"}


class CudaMemoryStats(CallRule):
    """CUDA memory statistics read 0 on every other device.

    **What it does**: finds `torch.cuda.memory_allocated()`, `max_memory_allocated()`,
    `memory_reserved()` and `max_memory_reserved()`.

    **Why it matters**: memory reports silently say 0 bytes on other accelerators.

    **Example**:

        peak = torch.cuda.max_memory_allocated() / 2**30

    **Use instead**: `torch.accelerator.max_memory_allocated()` (and friends), which raise when
    there is no accelerator, so guard them with `torch.accelerator.is_available()`.

    **Fix safety**: safe for calls without arguments: the readers become
    `(torch.accelerator.X() if torch.accelerator.is_available() else 0)`, identical on CUDA and
    still 0 on CPU. Calls with a device argument are reported only. The memory housekeeping that
    raises without CUDA (`reset_peak_memory_stats()`, `mem_get_info()`, ...) is TP219's.
    """

    code = "TP202"
    name = "cuda-memory-stats"
    message = "CUDA memory statistics are 0 on other devices"
    fix_title = "Use torch.accelerator memory statistics, guarded by torch.accelerator.is_available()"
    severity = Severity.WARNING
    target_severity = Severity.per_fact("accelerator", {False: Severity.INFO})
    fix_safety = FixSafety.SAFE
    triggers = (b"memory_allocated", b"memory_reserved")
    callees = frozenset(f"torch.cuda.{name}" for name in _READERS)
    VALID = ("import torch\npeak = torch.accelerator.max_memory_allocated()\n",)
    INVALID = (
        Example(
            "import torch\npeak = torch.cuda.max_memory_allocated() / 2**30\n",
            fixed="import torch\npeak = (torch.accelerator.max_memory_allocated() if "
            "torch.accelerator.is_available() else 0) / 2**30\n",
        ),
        "import torch\nused = torch.cuda.memory_allocated(device)\n",
    )

    def report_call(self, node: ast.Call, name: str, context: PythonContext) -> None:
        short = name.rsplit(".", 1)[1]
        if guarded_by_availability(node, context):
            return  # the fix's own form (or, for torch < 2.6, its CUDA spelling)
        parent = context.parent()
        # a whole statement, assigned value or argument needs no parentheses around the conditional
        whole = isinstance(parent, (ast.Expr, ast.Assign)) or (
            isinstance(parent, ast.Call) and any(argument is node for argument in parent.args)
        )
        if node.args or node.keywords:
            context.report(self, node)
        elif short in _CUDA_ONLY:
            prefix, needs_import = context.torch_prefix()
            template = f"{context.segment(node)} if {prefix}.cuda.is_available() else {_CUDA_ONLY[short]}"
            fix = Fix(FixSafety.SAFE, replacement=template if whole else f"({template})",
                      needs_torch_import=needs_import)
            context.report(self, node, fix=fix)
        elif short == "mem_get_info":
            template = ("{torch}.accelerator.get_memory_info() if {torch}.accelerator.is_available() "
                        "else _host_memory_info()")
            prefix, needs_import = context.torch_prefix()
            fix = Fix(FixSafety.SAFE, replacement=(template if whole else f"({template})").format(torch=prefix),
                      needs_torch_import=needs_import, helper="_host_memory_info")
            context.report(self, node, fix=fix)
        elif short in _RESETS:
            template = "{torch}.accelerator.reset_peak_memory_stats() if {torch}.accelerator.is_available() else None"
            if not isinstance(context.parent(), ast.Expr):
                template = f"({template})"
            context.report(self, node, fix=torch_fix(context, template))
        else:
            template = f"({{torch}}.accelerator.{short}() if {{torch}}.accelerator.is_available() else 0)"
            context.report(self, node, fix=torch_fix(context, template))
