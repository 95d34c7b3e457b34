"""TP103: `torch.device('cuda')`."""

from __future__ import annotations

import ast

from torchport.rules.base import Example, FixSafety, PythonRule, Severity
from torchport.rules.context import PythonContext
from torchport.rules.patterns import is_cuda_string, torch_fix

__all__ = ["TorchDeviceCuda"]


class TorchDeviceCuda(PythonRule):
    """`torch.device('cuda')` names one vendor's device.

    **What it does**: finds `torch.device('cuda')`, `torch.device('cuda:0')` and
    `torch.device('cuda', index)`.

    **Why it matters**: the device object is fine to build, but every tensor placed on it fails
    without CUDA (58 sites in 9 of 15 surveyed projects).

    **Example**:

        device = torch.device("cuda")

    **Use instead**:

        device = torch.accelerator.current_accelerator() or torch.device("cpu")

    **Fix safety**: unsafe. On a CUDA machine the result is the same device; elsewhere it becomes
    the local accelerator or the CPU, which changes where the program runs.
    """

    code = "TP103"
    name = "torch-device-cuda"
    message = "torch.device('cuda') hard-codes the CUDA device"
    fix_title = "Use torch.accelerator.current_accelerator() or torch.device('cpu')"
    severity = Severity.ERROR
    fix_safety = FixSafety.UNSAFE
    triggers = (b"'cuda", b'"cuda')
    node_types = (ast.Call,)
    VALID = (
        "import torch\ndevice = torch.device('cpu')\n",
        "import torch\ndevice = torch.accelerator.current_accelerator()\n",
        "device = device('cuda')\n",
    )
    INVALID = (
        Example(
            "import torch\ndevice = torch.device('cuda')\n",
            fixed='import torch\ndevice = (torch.accelerator.current_accelerator() or torch.device("cpu"))\n',
        ),
        "import torch as th\nd = th.device('cuda:1')\n",
        "from torch import device\nd = device('cuda', rank)\n",
    )

    def check(self, node: ast.Call, context: PythonContext) -> None:
        if context.called(node) != "torch.device" or not node.args or not is_cuda_string(node.args[0]):
            return
        fix = None
        if len(node.args) == 1 and not node.keywords and node.args[0].value == "cuda":
            fix = torch_fix(
                context,
                '({torch}.accelerator.current_accelerator() or {torch}.device("cpu"))',
                FixSafety.UNSAFE,
            )
        context.report(self, node, fix=fix)
