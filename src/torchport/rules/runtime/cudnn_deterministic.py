"""TP210: `torch.backends.cudnn.deterministic = True`."""

from __future__ import annotations

import ast

from torchport.rules.base import Example, Fix, FixSafety, Severity
from torchport.rules.context import PythonContext
from torchport.rules.patterns import AssignmentRule

__all__ = ["CudnnDeterministic"]


class CudnnDeterministic(AssignmentRule):
    """Determinism requested from cuDNN only.

    **What it does**: finds assignments to `torch.backends.cudnn.deterministic`.

    **Why it matters**: the flag has no effect on any other device, so runs believed to be
    reproducible are not (55 sites in 2 of 15 projects).

    **Example**:

        torch.backends.cudnn.deterministic = True

    **Use instead**: `torch.use_deterministic_algorithms(True)`, which covers every backend.

    **Fix safety**: unsafe: the global switch also makes non-deterministic ops raise, which the
    cuDNN flag never did.
    """

    code = "TP210"
    name = "cudnn-deterministic"
    message = "torch.backends.cudnn.deterministic has no effect off CUDA"
    fix_title = "Use torch.use_deterministic_algorithms(True)"
    severity = Severity.WARNING
    target_severity = Severity.per_fact("accelerator", {False: Severity.INFO})
    fix_safety = FixSafety.UNSAFE
    triggers = (b"deterministic =", b"deterministic=")
    targets = frozenset({"torch.backends.cudnn.deterministic"})
    VALID = ("import torch\ntorch.use_deterministic_algorithms(True)\n",)
    INVALID = (
        Example(
            "import torch\ntorch.backends.cudnn.deterministic = True  # reproducible\n",
            fixed="import torch\ntorch.use_deterministic_algorithms(True)  # reproducible\n",
        ),
        "from torch.backends import cudnn\ncudnn.deterministic = args.deterministic\n",
    )

    def fix_for(self, node: ast.Assign, name: str, context: PythonContext) -> Fix | None:
        if not (isinstance(node.value, ast.Constant) and node.value.value is True) or len(node.targets) != 1:
            return None
        prefix, needs_import = context.torch_prefix()
        return Fix(
            FixSafety.UNSAFE,
            replacement=f"{prefix}.use_deterministic_algorithms(True)",
            statement=True,
            needs_torch_import=needs_import,
        )
