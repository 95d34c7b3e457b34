"""TP118: the legacy typed tensors of CUDA, `torch.cuda.FloatTensor` and its siblings."""

from __future__ import annotations

import ast

from torchport.rules.base import Example, Fix, FixSafety, PythonRule, Severity
from torchport.rules.context import PythonContext
from torchport.rules.patterns import guarded_by_availability

__all__ = ["LegacyCudaTensorType"]

_TYPES = frozenset(
    f"{kind}Tensor"
    for kind in ("Float", "Double", "Half", "BFloat16", "Byte", "Char", "Short", "Int", "Long", "Bool")
)


class LegacyCudaTensorType(PythonRule):
    """`torch.cuda.FloatTensor` and the other legacy CUDA tensor types.

    **What it does**: finds reads of `torch.cuda.FloatTensor`, `torch.cuda.LongTensor` and the other
    legacy typed tensors of `torch.cuda`: as constructors (`Tensor = torch.cuda.FloatTensor;
    Tensor(n, 1)`, common in GAN scripts), in `x.type(torch.cuda.FloatTensor)` and in checks.

    **Why it matters**: on a torch without CUDA, constructing one raises ("type
    torch.cuda.FloatTensor not available") and `.type()` to one raises too.

    **Example**:

        valid = torch.cuda.FloatTensor(n, 1).fill_(1.0)

    **Use instead**: `torch.ones(n, 1, device=device)`, `x.to(device, torch.float32)`.

    **Fix safety**: unsafe: the type becomes `(torch.cuda.FloatTensor if torch.cuda.is_available()
    else torch.FloatTensor)`, the same on a CUDA machine; elsewhere the tensors are CPU tensors (torch
    has legacy typed tensors for CUDA and the CPU only), so on another accelerator they must still be
    moved to the model's device.
    """

    code = "TP118"
    name = "legacy-cuda-tensor-type"
    message = "Legacy CUDA tensor type (torch.cuda.FloatTensor, ...) raises without CUDA"
    fix_title = "Use the CPU tensor type when CUDA is not available (or torch.tensor(..., device=device))"
    severity = Severity.ERROR
    fix_safety = FixSafety.UNSAFE
    unsafe_reason = "without CUDA the tensors are CPU tensors, on every other machine"
    triggers = tuple(f"cuda.{name}".encode() for name in sorted(_TYPES))
    node_types = (ast.Attribute,)
    VALID = (
        "import torch\nx = torch.FloatTensor(2)\n",
        "import torch\nT = torch.cuda.FloatTensor if torch.cuda.is_available() else torch.FloatTensor\n",
    )
    INVALID = (
        Example(
            "import torch\nTensor = torch.cuda.FloatTensor\n",
            fixed="import torch\nTensor = torch.cuda.FloatTensor if torch.cuda.is_available() else torch.FloatTensor\n",
        ),
        Example(
            "import torch\nx = y.type(torch.cuda.LongTensor)\n",
            fixed="import torch\nx = y.type(torch.cuda.LongTensor if torch.cuda.is_available() else torch.LongTensor)\n",
        ),
        Example(
            "import torch\nv = torch.cuda.FloatTensor(4, 1).fill_(1.0)\n",
            fixed="import torch\nv = (torch.cuda.FloatTensor if torch.cuda.is_available() else torch.FloatTensor)(4, 1)"
            ".fill_(1.0)\n",
        ),
    )

    def check(self, node: ast.Attribute, context: PythonContext) -> None:
        if node.attr not in _TYPES or not isinstance(node.ctx, ast.Load):
            return
        if context.qualified_name(node) != f"torch.cuda.{node.attr}":
            return
        if guarded_by_availability(node, context):
            return
        parent = context.parent()
        if isinstance(parent, ast.IfExp) and node is parent.orelse and "is_available" in context.segment(parent.test):
            return
        prefix, needs_import = context.torch_prefix()
        text = f"{context.segment(node)} if {prefix}.cuda.is_available() else {prefix}.{node.attr}"
        whole = isinstance(parent, (ast.Assign, ast.keyword, ast.Return)) or (
            isinstance(parent, ast.Call) and any(argument is node for argument in parent.args)
        )
        fix = Fix(FixSafety.UNSAFE, replacement=text if whole else f"({text})", needs_torch_import=needs_import)
        context.report(self, node, fix=fix)
