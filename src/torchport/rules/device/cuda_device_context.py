"""TP117: the `torch.cuda.device(index)` context manager."""

from __future__ import annotations

import ast

from torchport.fix import neutral
from torchport.rules.base import Example, Fix, FixSafety, Severity
from torchport.rules.context import PythonContext
from torchport.rules.patterns import CallRule

__all__ = ["CudaDeviceContext"]


class CudaDeviceContext(CallRule):
    """`with torch.cuda.device(i):` selects a CUDA device for a block, and raises without CUDA.

    **What it does**: finds calls of `torch.cuda.device(...)`, the context manager (not
    `torch.device`).

    **Why it matters**: the block never runs on a machine without CUDA ("Torch not compiled with
    CUDA enabled"), though nothing in it may need a GPU.

    **Example**:

        with torch.cuda.device(0):
            y = model(x)

    **Use instead**: `torch.accelerator.device_index(i)` (torch 2.8 or newer), which does nothing
    when given `None`.

    **Fix safety**: safe. In a `with` statement, `torch.cuda.device(i)` becomes
    `torch.accelerator.device_index(i if torch.accelerator.is_available() else None)`: the same
    device switch on CUDA, the local accelerator's elsewhere, and no switch without one. An
    argument that is a string or a `torch.device(...)` (which `device_index` does not take), and a
    context manager kept for later, are reported only. For torch older than 2.8 it stays
    `torch.cuda.device(i if torch.cuda.is_available() else -1)` (-1 switches nothing).
    """

    code = "TP117"
    name = "cuda-device-context"
    message = "torch.cuda.device(...) raises without CUDA"
    fix_title = "Use torch.accelerator.device_index(index)"
    severity = Severity.ERROR
    fix_safety = FixSafety.SAFE
    triggers = (b"cuda.device(",)
    callees = frozenset({"torch.cuda.device"})
    VALID = (
        "import torch\nwith torch.accelerator.device_index(0):\n    pass\n",
        "import contextlib\nwith contextlib.nullcontext():\n    pass\n",
    )
    INVALID = (
        Example(
            "import torch\nwith torch.cuda.device(args.gpu):  # the worker's GPU\n    pass\n",
            fixed="import torch\nwith torch.accelerator.device_index(args.gpu if torch.accelerator.is_available() "
            "else None):  # the worker's GPU\n    pass\n",
        ),
        Example("import torch\nselect = torch.cuda.device(1)\n", count=1),
    )

    def report_call(self, node: ast.Call, name: str, context: PythonContext) -> None:
        argument = node.args[0] if len(node.args) == 1 and not node.keywords else None
        if isinstance(argument, ast.IfExp) and "is_available" in context.segment(argument.test):
            return  # the fix's own form, as written for torch < 2.6
        fix = None
        unsuitable = isinstance(argument, ast.JoinedStr) or (
            isinstance(argument, ast.Constant) and not isinstance(argument.value, int)
        )
        if argument is not None and isinstance(context.parent(), ast.withitem) and not unsuitable:
            if not (isinstance(argument, ast.Call) and context.called(argument) == "torch.device"):
                prefix, needs_import = context.torch_prefix()
                index = neutral.when_available(prefix, context.segment(argument), "None", bare=True)
                replacement = f"{prefix}.accelerator.device_index({index})"
                # torch < 2.6: CUDA's own context, where index -1 (not None) switches nothing
                legacy = f"{prefix}.cuda.device({context.segment(argument)} if {prefix}.cuda.is_available() else -1)"
                fix = Fix(FixSafety.SAFE, replacement=replacement, needs_torch_import=needs_import, legacy=legacy)
        context.report(self, node, fix=fix)
