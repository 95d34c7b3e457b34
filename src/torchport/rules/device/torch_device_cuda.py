"""TP103: `torch.device('cuda')`."""

from __future__ import annotations

import ast

from torchport.fix import neutral
from torchport.rules.base import Example, FixSafety, PythonRule, Severity
from torchport.rules.context import PythonContext
from torchport.rules.patterns import is_cuda_string, neutral_fix

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

        device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")

    **Fix safety**: unsafe (`torch.device('cuda', index)` keeps its index). On a CUDA machine the result is the same device; elsewhere it becomes
    the local accelerator or the CPU, which changes where the program runs.
    """

    code = "TP103"
    name = "torch-device-cuda"
    message = "torch.device('cuda') hard-codes the CUDA device"
    fix_title = "Use torch.accelerator.current_accelerator() or torch.device('cpu')"
    severity = Severity.ERROR
    fix_safety = FixSafety.UNSAFE
    unsafe_reason = "the program runs on the local accelerator or the CPU instead of failing without CUDA"
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
            fixed="import torch\ndevice = (torch.accelerator.current_accelerator() if torch.accelerator.is_available() "
            'else torch.device("cpu"))\n',
        ),
        "import torch as th\nd = th.device('cuda:1')\n",
        Example(
            "import torch\nd = torch.device('cuda', rank)\n",
            fixed="import torch\nd = torch.device(torch.accelerator.current_accelerator().type if "
            'torch.accelerator.is_available() else "cpu", rank)\n',
        ),
    )

    def check(self, node: ast.Call, context: PythonContext) -> None:
        if context.called(node) != "torch.device" or not node.args or not is_cuda_string(node.args[0]):
            return
        if node.keywords or len(node.args) > 2:
            context.report(self, node)
        elif len(node.args) == 2:
            bare_type = neutral_fix(context, lambda torch: neutral.device_type(torch, bare=True))
            context.report(self, node.args[0], fix=bare_type)
        elif node.args[0].value in ("cuda", "cuda:0"):
            context.report(self, node, fix=neutral_fix(context, neutral.device))
        else:
            context.report(self, node)
