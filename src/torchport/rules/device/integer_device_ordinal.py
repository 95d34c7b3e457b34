"""TP108: integer device ordinals: `.to(rank)`, `.cuda(gpu)`, `.to(0)`."""

from __future__ import annotations

import ast
import re

from torchport.fix import neutral
from torchport.rules.base import Example, Fix, FixSafety, PythonRule, Severity
from torchport.rules.context import PythonContext

__all__ = ["IntegerDeviceOrdinal"]

_ORDINAL_NAME = re.compile(r"(local_)?rank|gpu\d*|gpu_(id|index)|device_(id|index)|local_gpu", re.IGNORECASE)


def _looks_like_ordinal(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int) and not isinstance(node.value, bool)
    if isinstance(node, ast.Name):
        return _ORDINAL_NAME.fullmatch(node.id) is not None
    if isinstance(node, ast.Attribute):
        return _ORDINAL_NAME.fullmatch(node.attr) is not None
    return False


class IntegerDeviceOrdinal(PythonRule):
    """A bare integer used as a device means "CUDA device N".

    **What it does**: finds `device=0` keywords and `.to(rank)`, `.to(0)` and `.cuda(gpu)`, where
    the argument is an
    integer literal or a variable named like an ordinal (`rank`, `local_rank`, `gpu`,
    `device_id`, ...).

    **Why it matters**: PyTorch reads a bare integer as an index on the current accelerator; on a
    CPU-only machine it fails, and string-only device remapping misses it (survey lesson 2).

    **Example**:

        model = model.to(local_rank)

    **Use instead**: `torch.device(torch.accelerator.current_accelerator().type, local_rank)`.

    **Fix safety**: unsafe. `x.to(rank)` and `x.cuda(rank)` become
    `x.to(torch.device(<best device type>, rank))`: CUDA device `rank` on a CUDA machine, the
    local accelerator's device `rank` elsewhere, and the CPU without an accelerator.
    """

    code = "TP108"
    name = "integer-device-ordinal"
    message = "Integer device ordinal means 'accelerator N' and fails without one"
    fix_title = "Build the device explicitly: torch.device(accelerator_type, index)"
    severity = Severity.ERROR
    fix_safety = FixSafety.UNSAFE
    unsafe_reason = "the ordinal names a device of the local accelerator, or the CPU, instead of a CUDA device"
    triggers = (b".cuda(", b"rank)", b"gpu)", b"gpu_id)", b"gpu_index)", b"device_id)", b"device_index)", b".to(0")
    trigger_patterns = (rb"device\s*=\s*\d",)
    node_types = (ast.Call,)
    VALID = (
        "x = x.to(device)\n",
        "x = x.to(torch.float16)\n",
        "x = x.cuda()\n",
        "ranked = ranks.to(rank_dtype)\n",
    )
    INVALID = (
        Example(
            "import torch\nmodel = model.to(local_rank)\n",
            fixed="import torch\nmodel = model.to(torch.device(torch.accelerator.current_accelerator().type if "
            'torch.accelerator.is_available() else "cpu", local_rank))\n',
        ),
        "x = x.cuda(args.gpu)\n",
        "t = t.to(0)\n",
        Example(
            "import torch\ng = torch.zeros(2, device=0)\n",
            fixed="import torch\ng = torch.zeros(2, device=torch.device(torch.accelerator.current_accelerator().type if "
            'torch.accelerator.is_available() else "cpu", 0))\n',
        ),
    )

    def check(self, node: ast.Call, context: PythonContext) -> None:
        for keyword in node.keywords:
            value = keyword.value
            if keyword.arg == "device" and isinstance(value, ast.Constant) and type(value.value) is int:
                prefix, needs_import = context.torch_prefix()
                replacement = f"{prefix}.device({neutral.device_type(prefix, bare=True)}, {value.value})"
                fix = Fix(FixSafety.UNSAFE, replacement=replacement, needs_torch_import=needs_import)
                context.report(self, value, fix=fix)
        function = node.func
        if not isinstance(function, ast.Attribute) or function.attr not in {"to", "cuda"}:
            return
        if not node.args or not _looks_like_ordinal(node.args[0]):
            return
        if context.qualified_name(function) is not None:
            return
        prefix, needs_import = context.torch_prefix()
        ordinal = f"{prefix}.device({neutral.device_type(prefix, bare=True)}, {context.segment(node.args[0])})"
        if any(isinstance(item, ast.Lambda) for item in context.stack):
            ordinal = f"device={ordinal}"  # a storage's .to() takes the device by keyword only
        rest = [context.segment(item) for item in [*node.args[1:], *node.keywords]]
        replacement = f"{context.segment(function.value)}.to({', '.join([ordinal, *rest])})"
        context.report(self, node, fix=Fix(FixSafety.UNSAFE, replacement=replacement, needs_torch_import=needs_import))
