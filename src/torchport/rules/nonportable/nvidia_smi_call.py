"""TP509: `nvidia-smi` called from Python."""

from __future__ import annotations

import ast

from torchport.rules.base import PythonRule, Severity
from torchport.rules.context import PythonContext

__all__ = ["NvidiaSmiCall"]


class NvidiaSmiCall(PythonRule):
    """Shelling out to `nvidia-smi`.

    **What it does**: finds string literals that run `nvidia-smi` (subprocess, os.system).

    **Why it matters**: the binary exists only with an NVIDIA driver; the call fails (or the
    parsing of its output does) everywhere else.

    **Example**:

        out = subprocess.check_output(["nvidia-smi", "--query-gpu=memory.used", "--format=csv"])

    **Use instead**: `torch.accelerator.device_count()` and `torch.accelerator` memory statistics;
    `torchport doctor` for inventories.

    **Fix safety**: no automatic fix.
    """

    code = "TP509"
    name = "nvidia-smi-call"
    message = "nvidia-smi exists only with an NVIDIA driver"
    fix_title = "Query devices through torch.accelerator instead"
    severity = Severity.ERROR
    triggers = (b"nvidia-smi",)
    node_types = (ast.Constant,)
    VALID = ("import torch\nn = torch.accelerator.device_count()\n",)
    INVALID = (
        "import subprocess\nsubprocess.run(['nvidia-smi', '-L'])\n",
        "import os\nos.system('nvidia-smi --query-gpu=name --format=csv')\n",
    )

    def check(self, node: ast.Constant, context: PythonContext) -> None:
        value = node.value
        if isinstance(value, str) and value.split(" ", 1)[0] in {"nvidia-smi", "/usr/bin/nvidia-smi"}:
            context.report(self, node)
