"""TP101: a 'cuda' / 'cuda:N' string literal outside the contexts more specific rules cover."""

from __future__ import annotations

import ast

from torchport.rules.base import PythonRule, Severity
from torchport.rules.context import PythonContext
from torchport.rules.patterns import is_cuda_string

__all__ = ["CudaStringLiteral"]

_OWNED_KEYWORDS = {"device", "map_location", "device_type"}
_OWNED_CALLEES = {"torch.device", "torch.autocast", "torch.amp.autocast", "torch.amp.GradScaler"}


class CudaStringLiteral(PythonRule):
    """Hard-coded `'cuda'` device string (idiom I1).

    **What it does**: finds the strings `'cuda'` and `'cuda:N'` used as values: configuration
    variables, argparse defaults, `.to('cuda')` arguments, dictionary entries.

    **Why it matters**: a hard-coded device crashes as soon as the code runs anywhere but an
    NVIDIA GPU. It was the most frequent lock-in in the field survey (200 sites in 14 of 15 projects).

    **Example**:

        parser.add_argument("--device", default="cuda")

    **Use instead**: derive the device once from the accelerator and pass it around:

        device = torch.accelerator.current_accelerator() or torch.device("cpu")

    **Fix safety**: no automatic fix; the right device depends on how the value flows.
    More specific rules own `torch.device('cuda')` (TP103), `device='cuda'` keywords (TP104),
    comparisons (TP105), the availability ternary (TP106) and `map_location` (TP110).
    """

    code = "TP101"
    name = "cuda-string-literal"
    message = "Hard-coded 'cuda' device string"
    fix_title = "Derive the device from torch.accelerator.current_accelerator() instead of a literal"
    severity = Severity.ERROR
    target_severity = {}
    triggers = (b"'cuda", b'"cuda')
    node_types = (ast.Constant,)
    VALID = (
        "import torch\ndevice = torch.accelerator.current_accelerator()\n",
        "import torch\nx = torch.zeros(2, device='cuda')\n",
        "import torch\nif device.type == 'cuda':\n    pass\n",
        "name = 'cudagraph'\n",
    )
    INVALID = (
        "DEVICE = 'cuda'\n",
        "parser.add_argument('--device', default='cuda:0')\n",
        "x = x.to('cuda')\n",
    )

    def check(self, node: ast.Constant, context: PythonContext) -> None:
        if not is_cuda_string(node) or self._owned_elsewhere(node, context):
            return
        context.report(self, node)

    @staticmethod
    def _owned_elsewhere(node: ast.Constant, context: PythonContext) -> bool:
        parent = context.parent()
        if isinstance(parent, ast.keyword):
            return parent.arg in _OWNED_KEYWORDS
        if isinstance(parent, (ast.Compare, ast.IfExp)):
            return True
        if isinstance(parent, ast.Call) and context.called(parent) in _OWNED_CALLEES:
            return True
        if isinstance(parent, ast.arguments):
            return True
        return False
