"""TP212: `torch.backends.cuda.matmul.allow_tf32` / `torch.backends.cudnn.allow_tf32`."""

from __future__ import annotations

import ast

from torchport.rules.base import Example, Fix, FixSafety, Severity
from torchport.rules.context import PythonContext
from torchport.rules.patterns import AssignmentRule

__all__ = ["AllowTf32"]

_MATMUL = "torch.backends.cuda.matmul.allow_tf32"


class AllowTf32(AssignmentRule):
    """TF32 switched on through CUDA-only flags.

    **What it does**: finds assignments to `torch.backends.cuda.matmul.allow_tf32` and
    `torch.backends.cudnn.allow_tf32`.

    **Why it matters**: other devices never read these flags, so the precision/speed trade-off
    the author chose is lost (9 sites in 3 of 15 projects).

    **Example**:

        torch.backends.cuda.matmul.allow_tf32 = True

    **Use instead**: `torch.set_float32_matmul_precision("high")`, read by every backend.

    **Fix safety**: unsafe, for the matmul flag set to a constant: on CPU "high" may also let
    oneDNN use reduced-precision matmuls, which changes results slightly.
    """

    code = "TP212"
    name = "allow-tf32"
    message = "TF32 flag is read by CUDA only"
    fix_title = "Use torch.set_float32_matmul_precision('high')"
    severity = Severity.INFO
    fix_safety = FixSafety.UNSAFE
    triggers = (b"allow_tf32",)
    targets = frozenset({_MATMUL, "torch.backends.cudnn.allow_tf32"})
    VALID = ("import torch\ntorch.set_float32_matmul_precision('high')\n",)
    INVALID = (
        Example(
            "import torch\ntorch.backends.cuda.matmul.allow_tf32 = True\n",
            fixed='import torch\ntorch.set_float32_matmul_precision("high")\n',
        ),
        "import torch\ntorch.backends.cudnn.allow_tf32 = True\n",
    )

    def fix_for(self, node: ast.Assign, name: str, context: PythonContext) -> Fix | None:
        value = node.value
        if name != _MATMUL or len(node.targets) != 1 or not isinstance(value, ast.Constant):
            return None
        if not isinstance(value.value, bool):
            return None
        precision = "high" if value.value else "highest"
        prefix, needs_import = context.torch_prefix()
        return Fix(
            FixSafety.UNSAFE,
            replacement=f'{prefix}.set_float32_matmul_precision("{precision}")',
            statement=True,
            needs_torch_import=needs_import,
        )
