"""TP110: `torch.load(..., map_location='cuda')`."""

from __future__ import annotations

import ast

from torchport.fix import neutral
from torchport.rules.base import Example, FixSafety, PythonRule, Severity
from torchport.rules.context import PythonContext, keyword_argument
from torchport.rules.patterns import device_literal_fix, is_cuda_string, neutral_fix

__all__ = ["CudaMapLocation"]

_LOADERS = {"torch.load", "torch.jit.load"}


class CudaMapLocation(PythonRule):
    """A checkpoint loaded straight onto CUDA.

    **What it does**: finds `torch.load` / `torch.jit.load` with `map_location` set to `'cuda'`,
    `'cuda:N'`, `torch.device('cuda')` or a lambda calling `.cuda()`.

    **Why it matters**: loading fails on any machine without CUDA, before the model even exists
    (75 `map_location` sites in 13 of 15 projects; the literal 'cuda' ones break).

    **Example**:

        state = torch.load(path, map_location="cuda")

    **Use instead**: `torch.load(path, map_location=device)` with the resolved device, or
    `map_location="cpu"` followed by `model.to(device)`.

    **Fix safety**: unsafe for `'cuda'`, `'cuda:N'` and `torch.device('cuda...')`: the checkpoint
    is mapped onto the best available device (the current CUDA device on a CUDA machine; device N
    of the accelerator for `'cuda:N'`, and `"cpu"` without one, as `torch.load` knows no `'cpu:N'`).
    A lambda is reported only.
    """

    code = "TP110"
    name = "cuda-map-location"
    message = "torch.load maps the checkpoint onto CUDA"
    fix_title = "Pass map_location=<resolved device> (or 'cpu' and move the model after)"
    severity = Severity.ERROR
    fix_safety = FixSafety.UNSAFE
    unsafe_reason = "the checkpoint loads onto the local accelerator or the CPU instead of failing without CUDA"
    triggers = (b"map_location",)
    node_types = (ast.Call,)
    VALID = (
        "import torch\nstate = torch.load(path, map_location='cpu')\n",
        "import torch\nstate = torch.load(path, map_location=device)\n",
    )
    INVALID = (
        Example(
            "import torch\nstate = torch.load(path, map_location='cuda')\n",
            fixed="import torch\nstate = torch.load(path, map_location=torch.accelerator.current_accelerator().type "
            'if torch.accelerator.is_available() else "cpu")\n',
        ),
        Example(
            "import torch\nstate = torch.load(path, map_location='cuda:0')\n",
            fixed="import torch\nstate = torch.load(path, map_location=torch.accelerator.current_accelerator().type "
            "+ ':0' if torch.accelerator.is_available() else \"cpu\")\n",
        ),
        "import torch\nstate = torch.load(path, map_location=torch.device('cuda:0'))\n",
        "import torch\nstate = torch.load(path, map_location=lambda storage, loc: storage.cuda())\n",
    )

    def check(self, node: ast.Call, context: PythonContext) -> None:
        if context.called(node) not in _LOADERS:
            return
        keyword = keyword_argument(node, "map_location")
        value = keyword.value if keyword else (node.args[1] if len(node.args) > 1 else None)
        if value is None:
            return
        if is_cuda_string(value) or self._mentions_cuda(value, context):
            fix = None
            if is_cuda_string(value) and value.value != "cuda":
                index = value.value[len("cuda"):]
                fix = neutral_fix(context, lambda torch: neutral.indexed(torch, index, bare=True))
            elif is_cuda_string(value):
                fix = device_literal_fix(context, value, bare=True)
            elif not isinstance(value, ast.Lambda):
                fix = neutral_fix(context, lambda torch: neutral.device_type(torch, bare=True))
            context.report(self, value, fix=fix)

    @staticmethod
    def _mentions_cuda(value: ast.AST, context: PythonContext) -> bool:
        if isinstance(value, ast.Call) and context.called(value) == "torch.device":
            return bool(value.args) and is_cuda_string(value.args[0])
        if isinstance(value, ast.Lambda):
            body = value.body
            return isinstance(body, ast.Call) and isinstance(body.func, ast.Attribute) and body.func.attr == "cuda"
        return False
