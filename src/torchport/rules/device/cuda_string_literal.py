"""TP101: a 'cuda' / 'cuda:N' string literal outside the contexts more specific rules cover."""

from __future__ import annotations

import ast

from torchport.rules.base import Example, Fix, FixSafety, PythonRule, Severity
from torchport.rules.context import PythonContext, string_value
from torchport.rules.device.cuda_availability_ternary import is_cuda_available_call
from torchport.rules.patterns import device_literal_fix, is_cuda_string

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

    **Fix safety**: unsafe. The literal becomes the type of the best available device
    (`torch.accelerator.current_accelerator().type`, or `"cpu"` without an accelerator; an index
    as in 'cuda:1' is kept on an accelerator and dropped on the CPU), still a string, so code that tests or formats it keeps working; it is 'cuda' on a CUDA machine. Literals
    in a list or tuple (argparse `choices`) and dictionary keys (saved locations) are left alone.
    More specific rules own `torch.device('cuda')` (TP103), `device='cuda'` keywords (TP104),
    comparisons (TP105), the availability ternary (TP106) and `map_location` (TP110).
    """

    code = "TP101"
    name = "cuda-string-literal"
    message = "Hard-coded 'cuda' device string"
    fix_title = "Derive the device from torch.accelerator.current_accelerator() instead of a literal"
    severity = Severity.ERROR
    target_severity = {}
    fix_safety = FixSafety.UNSAFE
    unsafe_reason = "the program runs on the local accelerator or the CPU instead of failing without CUDA"
    triggers = (b"'cuda", b'"cuda')
    node_types = (ast.Constant,)
    VALID = (
        "import torch\ndevice = torch.accelerator.current_accelerator()\n",
        "import torch\nx = torch.zeros(2, device='cuda')\n",
        "import torch\nif device.type == 'cuda':\n    pass\n",
        "name = 'cudagraph'\n",
    )
    INVALID = (
        Example(
            "import torch\nDEVICE = 'cuda'  # the GPU\n",
            fixed="import torch\nDEVICE = (torch.accelerator.current_accelerator().type if "
            'torch.accelerator.is_available() else "cpu")  # the GPU\n',
        ),
        Example(
            "import torch\nsecond = 'cuda:1' if n > 1 else 'cuda:0'\n",
            fixed="import torch\nsecond = (torch.accelerator.current_accelerator().type + ':1' if "
            "torch.accelerator.is_available() else \"cpu\") if n > 1 else (torch.accelerator.current_accelerator().type "
            "+ ':0' if torch.accelerator.is_available() else \"cpu\")\n",
            count=2,
        ),
        "parser.add_argument('--device', default='cuda:0')\n",
        "x = x.to('cuda')\n",
    )

    def check(self, node: ast.Constant, context: PythonContext) -> None:
        if not is_cuda_string(node) or self._owned_elsewhere(node, context):
            return
        context.report(self, node, fix=self._fix(node, context))

    @staticmethod
    def _fix(node: ast.Constant, context: PythonContext) -> Fix | None:
        parent = context.parent()
        if isinstance(parent, (ast.List, ast.Tuple, ast.Set)):
            return None
        if isinstance(parent, ast.Dict) and any(key is node for key in parent.keys):
            return None
        return device_literal_fix(context, node)

    @staticmethod
    def _owned_elsewhere(node: ast.Constant, context: PythonContext) -> bool:
        parent = context.parent()
        if isinstance(parent, ast.keyword):
            return parent.arg in _OWNED_KEYWORDS
        if isinstance(parent, ast.IfExp):
            # device ternaries ('cuda' if ... else 'cpu') are TP106's; a branch of another conditional is a value
            other = parent.orelse if parent.body is node else parent.body
            return parent.test is node or string_value(other) == "cpu" or is_cuda_available_call(parent.test, context)
        if isinstance(parent, ast.Compare):
            return True
        if isinstance(parent, ast.Call) and context.called(parent) in _OWNED_CALLEES:
            return True
        if isinstance(parent, ast.arguments):
            return True
        return False
