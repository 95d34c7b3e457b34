"""TP106: `'cuda' if torch.cuda.is_available() else 'cpu'` (idiom I2)."""

from __future__ import annotations

import ast

from torchport.rules.base import Example, FixSafety, PythonRule, Severity
from torchport.rules.context import PythonContext
from torchport.rules.patterns import is_cuda_string, torch_fix

__all__ = ["CudaAvailabilityTernary", "is_cuda_available_call"]


def is_cuda_available_call(node: ast.AST, context: PythonContext) -> bool:
    """Whether `node` is a call of torch.cuda.is_available, however it was imported."""
    return isinstance(node, ast.Call) and context.called(node) == "torch.cuda.is_available"


class CudaAvailabilityTernary(PythonRule):
    """The CUDA-or-CPU ternary ignores every other accelerator (idiom I2).

    **What it does**: finds `'cuda' if torch.cuda.is_available() else 'cpu'` and the same with
    `torch.device(...)` on both sides.

    **Why it matters**: it runs on CPU, but on a Trainium, TPU, Apple or Intel machine it picks
    the CPU and leaves the accelerator idle.

    **Example**:

        device = "cuda" if torch.cuda.is_available() else "cpu"

    **Use instead**:

        device = torch.accelerator.current_accelerator().type if torch.accelerator.is_available() else "cpu"

    **Fix safety**: safe. On a CUDA machine the result is still `'cuda'`, on a machine without an
    accelerator still `'cpu'`; only machines with another accelerator change, to use it.
    """

    code = "TP106"
    name = "cuda-availability-ternary"
    message = "'cuda' if torch.cuda.is_available() else 'cpu' ignores other accelerators"
    fix_title = "Pick the device from torch.accelerator"
    severity = Severity.WARNING
    target_severity = Severity.per_fact("accelerator", {False: Severity.INFO})
    fix_safety = FixSafety.SAFE
    triggers = (b"is_available",)
    node_types = (ast.IfExp,)
    VALID = (
        "import torch\nd = torch.accelerator.current_accelerator()\n",
        "import torch\nd = 'cuda' if use_gpu else 'cpu'\n",
    )
    INVALID = (
        Example(
            "import torch\ndevice = 'cuda' if torch.cuda.is_available() else 'cpu'\n",
            fixed="import torch\ndevice = (torch.accelerator.current_accelerator().type "
            "if torch.accelerator.is_available() else 'cpu')\n",
        ),
        Example(
            "import torch as th\nd = th.device('cuda' if th.cuda.is_available() else 'cpu')\n",
            fixed="import torch as th\nd = th.device((th.accelerator.current_accelerator().type "
            "if th.accelerator.is_available() else 'cpu'))\n",
        ),
        Example(
            "from torch.cuda import is_available\nimport torch\n"
            "d = torch.device('cuda') if is_available() else torch.device('cpu')\n",
            fixed="from torch.cuda import is_available\nimport torch\n"
            "d = (torch.accelerator.current_accelerator() if torch.accelerator.is_available() "
            "else torch.device('cpu'))\n",
        ),
    )

    def check(self, node: ast.IfExp, context: PythonContext) -> None:
        if not is_cuda_available_call(node.test, context):
            return
        if is_cuda_string(node.body) and node.body.value == "cuda":
            template = "({torch}.accelerator.current_accelerator().type if {torch}.accelerator.is_available() else "
        elif self._is_device_cuda(node.body, context):
            template = "({torch}.accelerator.current_accelerator() if {torch}.accelerator.is_available() else "
        else:
            return
        fix = torch_fix(context, template + context.segment(node.orelse).replace("{", "{{").replace("}", "}}") + ")")
        context.report(self, node, fix=fix)

    @staticmethod
    def _is_device_cuda(node: ast.AST, context: PythonContext) -> bool:
        return (
            isinstance(node, ast.Call)
            and context.called(node) == "torch.device"
            and len(node.args) == 1
            and is_cuda_string(node.args[0])
            and node.args[0].value == "cuda"
        )
