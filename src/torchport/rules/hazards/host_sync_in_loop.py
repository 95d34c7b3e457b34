"""TP404: host synchronisations inside loops."""

from __future__ import annotations

import ast
import re

from torchport.rules.base import PythonRule, Severity
from torchport.rules.context import PythonContext

__all__ = ["HostSyncInLoop"]

_METHODS = {"item", "tolist", "cpu", "numpy"}
_TENSOR_NAMES = re.compile(r"(loss|logits|outputs?|preds?|predictions|grads?|tensor)(_\w+)?")


class HostSyncInLoop(PythonRule):
    """A device-to-host copy on every loop iteration.

    **What it does**: inside `for`/`while` bodies, finds `.item()`, `.tolist()`, `.cpu()`,
    `.numpy()`, and `print(...)` of values named like tensors (`loss`, `logits`, `outputs`).

    **Why it matters**: each one waits for the device; on lazy-tensor targets (XLA, Neuron) it
    also cuts the graph, forcing a compile and execution per step.

    **Example**:

        for batch in loader:
            loss = step(batch)
            total += loss.item()

    **Use instead**: accumulate on the device (`total += loss.detach()`) and read once after the
    loop, or every N steps.

    **Fix safety**: no automatic fix: removing a sync moves work out of the loop, a change of
    the program's logic.

    Severity per target: follows the profile fact 'execution': graph warning, eager info, host off.
    """

    code = "TP404"
    name = "host-sync-in-loop"
    message = "Host synchronisation inside a loop stalls the device every iteration"
    fix_title = "Accumulate on the device and read the value once after the loop"
    severity = Severity.INFO
    target_severity = Severity.per_fact("execution", {"graph": Severity.WARNING, "host": Severity.OFF})
    triggers = (b".item(", b".tolist(", b".cpu(", b".numpy(", b"print(loss", b"print(logit", b"print(output", b"print(pred", b"print(grad", b"print(tensor")
    node_types = (ast.Call,)
    VALID = (
        "total = loss.item()\n",
        "for batch in loader:\n    total += loss.detach()\n",
        "for name in names:\n    print(name)\n",
    )
    INVALID = (
        "for batch in loader:\n    total += loss.item()\n",
        "while running:\n    values = out.cpu().numpy()\n",
        "for step in range(10):\n    print(loss)\n",
    )

    def check(self, node: ast.Call, context: PythonContext) -> None:
        function = node.func
        if isinstance(function, ast.Attribute):
            if function.attr not in _METHODS or node.args or node.keywords:
                return
            if isinstance(function.value, ast.Call) and isinstance(function.value.func, ast.Attribute):
                if function.value.func.attr in _METHODS:
                    return
        elif isinstance(function, ast.Name) and function.id == "print":
            if not any(isinstance(arg, ast.Name) and _TENSOR_NAMES.fullmatch(arg.id) for arg in node.args):
                return
        else:
            return
        if context.in_loop():
            context.report(self, node)
