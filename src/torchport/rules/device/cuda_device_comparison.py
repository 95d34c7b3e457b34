"""TP105: comparisons against 'cuda' (`device == 'cuda'`, `'cuda' in device`)."""

from __future__ import annotations

import ast

from torchport.rules.base import Example, Fix, FixSafety, PythonRule, Severity
from torchport.rules.context import PythonContext
from torchport.rules.patterns import is_cuda_string

__all__ = ["CudaDeviceComparison"]


class CudaDeviceComparison(PythonRule):
    """A branch that asks "is this CUDA?" when it means "is this an accelerator?".

    **What it does**: finds `x == 'cuda'`, `x != 'cuda'`, `'cuda' in device` and
    `device.type == 'cuda'`.

    **Why it matters**: on any other accelerator the check is false, so the code silently takes
    its CPU path (no pinned memory, no autocast, no fused kernels) or refuses to run.

    **Example**:

        if device.type == "cuda":
            scaler = torch.amp.GradScaler("cuda")

    **Use instead**: `device.type != "cpu"`.

    **Fix safety**: unsafe, and only for `<expr>.type == 'cuda'` / `!= 'cuda'`, `'cuda' in
    <device string>` (which becomes `"cpu" not in <device string>`) and nanoGPT's
    `'cuda' if 'cuda' in device else 'cpu'` (which becomes `torch.device(device).type`): the branch now also runs on
    other accelerators, which is the point, but it changes behaviour there.
    """

    code = "TP105"
    name = "cuda-device-comparison"
    message = "Comparison against 'cuda' misses every other accelerator"
    fix_title = "Compare against 'cpu' instead: device.type != 'cpu'"
    severity = Severity.WARNING
    fix_safety = FixSafety.UNSAFE
    unsafe_reason = "the accelerator branch also runs on non-CUDA accelerators"
    triggers = (b"'cuda", b'"cuda')
    node_types = (ast.Compare,)
    VALID = (
        "if device.type != 'cpu':\n    pass\n",
        "if name == 'cudnn':\n    pass\n",
    )
    INVALID = (
        Example(
            "if device.type == 'cuda':\n    pass\n",
            fixed="if device.type != \"cpu\":\n    pass\n",
        ),
        Example("use_amp = x.device.type != 'cuda'\n", fixed='use_amp = x.device.type == "cpu"\n'),
        Example("if 'cuda' in args.device:\n    pass\n", fixed='if "cpu" not in args.device:\n    pass\n'),
        Example(
            "import torch\ndevice_type = 'cuda' if 'cuda' in device else 'cpu'  # for autocast\n",
            fixed="import torch\ndevice_type = torch.device(device).type  # for autocast\n",
        ),
        "on_gpu = str(device) == 'cuda:0'\n",
    )

    def check(self, node: ast.Compare, context: PythonContext) -> None:
        operands = [node.left, *node.comparators]
        if not any(is_cuda_string(operand) for operand in operands):
            return
        parent = context.parent()
        if self._is_type_ternary(node, parent):
            # nanoGPT's `'cuda' if 'cuda' in device else 'cpu'` is the device's type
            prefix, needs_import = context.torch_prefix()
            replacement = f"{prefix}.device({context.segment(node.comparators[0])}).type"
            fix = Fix(FixSafety.UNSAFE, replacement=replacement, needs_torch_import=needs_import)
            context.report(self, parent, fix=fix)
            return
        context.report(self, node, fix=self._fix(node, context))

    @staticmethod
    def _is_type_ternary(node: ast.Compare, parent: ast.AST | None) -> bool:
        return (
            isinstance(parent, ast.IfExp)
            and parent.test is node
            and len(node.ops) == 1
            and isinstance(node.ops[0], ast.In)
            and is_cuda_string(node.left)
            and node.left.value == "cuda"
            and is_cuda_string(parent.body)
            and parent.body.value == "cuda"
            and isinstance(parent.orelse, ast.Constant)
            and parent.orelse.value == "cpu"
        )

    @staticmethod
    def _fix(node: ast.Compare, context: PythonContext) -> Fix | None:
        if len(node.ops) != 1:
            return None
        left, right = node.left, node.comparators[0]
        if isinstance(node.ops[0], (ast.In, ast.NotIn)) and is_cuda_string(left) and left.value == "cuda":
            operator = "not in" if isinstance(node.ops[0], ast.In) else "in"
            return Fix(FixSafety.UNSAFE, replacement=f'"cpu" {operator} {context.segment(right)}')
        if not isinstance(node.ops[0], (ast.Eq, ast.NotEq)):
            return None
        if not (is_cuda_string(right) and right.value == "cuda"):
            return None
        if not (isinstance(left, ast.Attribute) and left.attr == "type"):
            return None
        operator = "!=" if isinstance(node.ops[0], ast.Eq) else "=="
        return Fix(FixSafety.UNSAFE, replacement=f'{context.segment(left)} {operator} "cpu"')
