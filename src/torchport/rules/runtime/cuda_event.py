"""TP205: `torch.cuda.Event` timing."""

from __future__ import annotations

import ast

from torchport.fix import neutral
from torchport.rules.base import Example, Fix, FixSafety, Severity
from torchport.rules.context import PythonContext
from torchport.rules.patterns import CallRule, guarded_by_availability

__all__ = ["CudaEvent"]


class CudaEvent(CallRule):
    """CUDA events used for timing or synchronisation.

    **What it does**: finds `torch.cuda.Event(...)`, and the class handed on to be called later
    (`partial(torch.cuda.Event, enable_timing=True)`, `make_event = Event`).

    **Why it matters**: raises without CUDA; timing code built on it has no CPU path.

    **Example**:

        start = torch.cuda.Event(enable_timing=True)

    **Use instead**: `torch.Event(device, enable_timing=True)` on accelerators, or
    `time.perf_counter()` around a synchronize.

    **Fix safety**: unsafe. The event becomes `torch.Event(...)` when `torch.accelerator.is_available()`
    (on CUDA the same event), else `_HostEvent(...)`, a small class the fix writes once into the
    module: CPU events cannot record or time, so it reads the host clock (`time.perf_counter()`, in
    milliseconds like `elapsed_time`), and `synchronize`, `wait` and `query` return at once. The
    class handed on becomes `(torch.Event if torch.accelerator.is_available() else _HostEvent)`. For
    torch older than 2.6 the accelerator check is CUDA's (or MPS') and the event `torch.cuda.Event`.
    """

    code = "TP205"
    name = "cuda-event"
    message = "torch.cuda.Event raises without CUDA"
    fix_title = "Use torch.Event(device, ...) or time.perf_counter()"
    severity = Severity.ERROR
    fix_safety = FixSafety.UNSAFE
    unsafe_reason = "without an accelerator, events read the host clock instead of failing"
    triggers = (b"Event",)
    callees = frozenset({"torch.cuda.Event"})
    VALID = (
        "import torch\ne = torch.Event(device, enable_timing=True)\n",
        "import threading\ne = threading.Event()\n",
        "import torch\ne = torch.cuda.Event() if torch.cuda.is_available() else None\n",
    )
    INVALID = (
        Example(
            "import torch\n\nstart = torch.cuda.Event(enable_timing=True)  # timing\n",
            fixed="import torch\n\n\n" + neutral.HELPERS["_HostEvent"].code + "\n\n"
            "start = (torch.Event(enable_timing=True) if torch.accelerator.is_available() "
            "else _HostEvent(enable_timing=True))  # timing\n",
        ),
        "from torch import cuda\nend = cuda.Event(enable_timing=True, blocking=True)\n",
        Example(
            "from functools import partial\n\nfrom torch.cuda import Event\n\ntimer = partial(Event, enable_timing=True)\n",
            fixed="from functools import partial\n\nfrom torch.cuda import Event\nimport torch\n\n\n"
            + neutral.HELPERS["_HostEvent"].code
            + "\n\ntimer = partial((torch.Event if torch.accelerator.is_available() else _HostEvent), "
            "enable_timing=True)\n",
        ),
    )
    node_types = (ast.Call, ast.Name, ast.Attribute)

    def check(self, node: ast.AST, context: PythonContext) -> None:
        if isinstance(node, ast.Call):
            super().check(node, context)
            return
        if not isinstance(node.ctx, ast.Load) or context.qualified_name(node) != "torch.cuda.Event":
            return
        parent = context.parent()
        handed_on = (isinstance(parent, ast.Call) and any(argument is node for argument in parent.args)) or (
            isinstance(parent, ast.Assign) and parent.value is node
        )
        if not handed_on or guarded_by_availability(node, context):
            return
        prefix, needs_import = context.torch_prefix()
        replacement = neutral.when_available(prefix, f"{prefix}.Event", "_HostEvent")
        fix = Fix(FixSafety.UNSAFE, replacement=replacement, needs_torch_import=needs_import, helper="_HostEvent")
        context.report(self, node, fix=fix)

    def report_call(self, node: ast.Call, name: str, context: PythonContext) -> None:
        if guarded_by_availability(node, context):
            return  # the CUDA event behind a CUDA check (what the fix writes for torch < 2.6)
        prefix, needs_import = context.torch_prefix()
        arguments = ", ".join(context.segment(argument) for argument in [*node.args, *node.keywords])
        replacement = neutral.when_available(prefix, f"{prefix}.Event({arguments})", f"_HostEvent({arguments})")
        fix = Fix(FixSafety.UNSAFE, replacement=replacement, needs_torch_import=needs_import, helper="_HostEvent")
        context.report(self, node, fix=fix)
