"""TP104: `device='cuda'` keyword arguments and parameter defaults."""

from __future__ import annotations

import ast

from torchport.rules.base import Example, FixSafety, PythonRule, Severity
from torchport.rules.context import PythonContext
from torchport.rules.patterns import device_literal_fix, is_cuda_string

__all__ = ["CudaDeviceKeyword"]


class CudaDeviceKeyword(PythonRule):
    """`device='cuda'` passed to a factory or used as a parameter default.

    **What it does**: finds `torch.zeros(3, device='cuda')` and parameter defaults such as
    `def f(x, device='cuda')`.

    **Why it matters**: factories with a CUDA device raise off CUDA; a default of `'cuda'` makes
    every caller that relies on it CUDA-only (33 sites in 11 of 15 projects).

    **Example**:

        def make_buffer(size, device="cuda"):
            return torch.empty(size, device=device)

    **Use instead**: take the device from the caller or resolve it from `torch.accelerator`;
    use `device=None` as the default and resolve it inside.

    **Fix safety**: unsafe. The literal becomes the type of the best available device
    (`torch.accelerator.current_accelerator().type`, or `"cpu"` without an accelerator): 'cuda' on
    a CUDA machine, the local accelerator or the CPU elsewhere.
    """

    code = "TP104"
    name = "cuda-device-keyword"
    message = "device='cuda' hard-codes the CUDA device"
    fix_title = "Pass a resolved device (or default to None and resolve it inside)"
    severity = Severity.ERROR
    fix_safety = FixSafety.UNSAFE
    unsafe_reason = "tensors are created on the local accelerator or the CPU instead of failing without CUDA"
    triggers = (b"'cuda", b'"cuda')
    node_types = (ast.keyword, ast.arguments)
    VALID = (
        "import torch\nx = torch.zeros(3, device=device)\n",
        "def f(x, device=None):\n    pass\n",
    )
    INVALID = (
        Example(
            "import torch\nx = torch.zeros(3, device='cuda')\n",
            fixed="import torch\nx = torch.zeros(3, device=(torch.accelerator.current_accelerator().type if "
            'torch.accelerator.is_available() else "cpu"))\n',
        ),
        "def make(size, device='cuda:0'):\n    pass\n",
        "def make(size, *, device: str = 'cuda'):\n    pass\n",
    )

    def check(self, node: ast.AST, context: PythonContext) -> None:
        if isinstance(node, ast.keyword):
            if node.arg == "device" and is_cuda_string(node.value):
                context.report(self, node.value, fix=device_literal_fix(context, node.value))
            return
        positional = [*node.posonlyargs, *node.args]
        pairs = list(zip(positional[len(positional) - len(node.defaults):], node.defaults))
        pairs += [(argument, default) for argument, default in zip(node.kwonlyargs, node.kw_defaults) if default]
        for argument, default in pairs:
            if is_cuda_string(default):
                context.report(self, default, fix=device_literal_fix(context, default))
