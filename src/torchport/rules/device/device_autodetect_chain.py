"""TP111: hand-written cuda/mps/cpu detection chains (idiom I3)."""

from __future__ import annotations

import ast

from torchport.rules.base import PythonRule, Severity
from torchport.rules.context import PythonContext

__all__ = ["DeviceAutodetectChain"]

_PROBES = {
    "torch.backends.mps.is_available",
    "torch.xpu.is_available",
    "torch.mps.is_available",
}


class DeviceAutodetectChain(PythonRule):
    """A device chain written by hand (`cuda`, then `mps`, then `cpu`) misses the rest.

    **What it does**: finds `torch.backends.mps.is_available()` or `torch.xpu.is_available()`
    used as the condition of an `if`/`elif` or a conditional expression.

    **Why it matters**: each hand-written chain knows only the devices its author had; Trainium,
    TPU, Ascend or Intel GPUs fall through to the CPU.

    **Example**:

        if torch.cuda.is_available():
            device = "cuda"
        elif torch.backends.mps.is_available():
            device = "mps"
        else:
            device = "cpu"

    **Use instead**: `torch.accelerator.current_accelerator() or torch.device("cpu")`.

    **Fix safety**: no automatic fix: chains differ in shape.
    """

    code = "TP111"
    name = "device-autodetect-chain"
    message = "Hand-written device detection chain misses other accelerators"
    fix_title = "Replace the chain with torch.accelerator.current_accelerator() or torch.device('cpu')"
    severity = Severity.INFO
    target_severity = Severity.per_fact("vendor package", {True: Severity.WARNING})
    triggers = (b"mps.is_available", b"xpu.is_available")
    node_types = (ast.If, ast.IfExp)
    VALID = (
        "import torch\nok = torch.backends.mps.is_available()\n",
        "import torch\nd = torch.accelerator.current_accelerator()\n",
    )
    INVALID = (
        "import torch\nif torch.cuda.is_available():\n    d = 'cuda'\nelif torch.backends.mps.is_available():\n"
        "    d = 'mps'\nelse:\n    d = 'cpu'\n",
        "import torch\nd = 'mps' if torch.backends.mps.is_available() else 'cpu'\n",
    )

    def check(self, node: ast.If | ast.IfExp, context: PythonContext) -> None:
        for inner in ast.walk(node.test):
            if isinstance(inner, ast.Call) and context.called(inner) in _PROBES:
                context.report(self, node.test)
                return
