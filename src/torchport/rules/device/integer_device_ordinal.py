"""TP108: integer device ordinals: `.to(rank)`, `.cuda(gpu)`, `.to(0)`."""

from __future__ import annotations

import ast
import re

from torchport.fix import neutral
from torchport.rules.base import Example, Fix, FixSafety, PythonRule, Severity
from torchport.rules.context import PythonContext

__all__ = ["IntegerDeviceOrdinal"]

_ORDINAL_NAME = re.compile(r"(local_)?rank|gpu\d*|gpu_(id|index)|device_(id|index)|local_gpu", re.IGNORECASE)


def _int_valued(node: ast.AST, context: PythonContext) -> bool:
    """Whether `node` holds an int, following the value through its name: a name bound only to
    ints (`dev = 0`, `gpu = int(...)`) in its function or module, or an item of a name bound to a
    list of ints (`device_ids = [0]`, `list(range(a, b))`)."""
    if isinstance(node, ast.Constant):
        return type(node.value) is int
    if isinstance(node, ast.Subscript):
        return isinstance(node.value, ast.Name) and _bound_only_to(node.value.id, _int_list, context)
    if isinstance(node, ast.Name):
        return _bound_only_to(node.id, _int_expression, context)
    return False


def _int_expression(value: ast.AST) -> bool:
    if isinstance(value, ast.Constant):
        return type(value.value) is int
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in {"int", "len"}


def _int_list(value: ast.AST) -> bool:
    if isinstance(value, (ast.List, ast.Tuple)):
        return bool(value.elts) and all(_int_expression(item) for item in value.elts)
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
        if value.func.id == "range":
            return True
        return value.func.id in {"list", "tuple"} and len(value.args) == 1 and _int_list(value.args[0])
    return False


def _bound_only_to(name: str, kind, context: PythonContext) -> bool:
    """Whether every binding of `name` in the innermost function (or the module) holding the node
    being checked is an assignment of a value `kind` accepts (and there is one)."""
    scope = context.binding_scope()
    if scope is None:
        return False
    if not isinstance(scope, ast.Module) and name in {argument.arg for argument in ast.walk(scope.args)
                                                      if isinstance(argument, ast.arg)}:
        return False
    bindings = [item for item in ast.walk(scope) if isinstance(item, ast.Assign) and len(item.targets) == 1
                and isinstance(item.targets[0], ast.Name) and item.targets[0].id == name]
    stores = context.stores(scope, name)
    return bool(bindings) and len(stores) == len(bindings) and all(kind(item.value) for item in bindings)


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

    An argument that is neither is followed through its name: a name bound only to ints in its
    function or module (`dev = 0`), an item of a list of ints (`device_ids[0]` after
    `device_ids = list(range(a, b))`). `.cuda(value)` is reported whatever the value.

    **Fix safety**: unsafe. `x.to(rank)` and `x.cuda(rank)` become
    `x.to(torch.device(<best device type>, rank))`: CUDA device `rank` on a CUDA machine, the
    local accelerator's device `rank` elsewhere, and the CPU without an accelerator. `.cuda(value)`
    with a value of another kind becomes `.to(value if torch.accelerator.is_available() else "cpu")`.
    """

    code = "TP108"
    name = "integer-device-ordinal"
    message = "Integer device ordinal means 'accelerator N' and fails without one"
    fix_title = "Build the device explicitly: torch.device(accelerator_type, index)"
    severity = Severity.ERROR
    fix_safety = FixSafety.UNSAFE
    unsafe_reason = "the ordinal names a device of the local accelerator, or the CPU, instead of a CUDA device"
    triggers = (b".cuda(", b"rank)", b"gpu)", b"gpu_id)", b"gpu_index)", b"device_id)", b"device_index)", b".to(0")
    trigger_patterns = (rb"device\s*=\s*\d", rb"\.to\(\w+\[")
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
        Example(
            "import torch\ndef f(model, local_rank, n):\n    device_ids = list(range(local_rank * n, (local_rank + 1) * n))\n"
            "    return model.to(device_ids[0])\n",
            fixed="import torch\ndef f(model, local_rank, n):\n    device_ids = list(range(local_rank * n, (local_rank + 1) * n))\n"
            "    return model.to(torch.device(torch.accelerator.current_accelerator().type if "
            'torch.accelerator.is_available() else "cpu", device_ids[0]))\n',
        ),
        Example(
            "import torch\nmodel = model.cuda(device)\n",
            fixed="import torch\nmodel = model.to((device if device is not None else "
            "torch.accelerator.current_device_index()) if torch.accelerator.is_available() else \"cpu\")\n",
        ),
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
        if not node.args or context.qualified_name(function) is not None:
            return
        if not (_looks_like_ordinal(node.args[0]) or _int_valued(node.args[0], context)):
            if function.attr == "cuda":
                self._any_device(node, context)
            return
        prefix, needs_import = context.torch_prefix()
        ordinal = f"{prefix}.device({neutral.device_type(prefix, bare=True)}, {context.segment(node.args[0])})"
        if any(isinstance(item, ast.Lambda) for item in context.stack):
            ordinal = f"device={ordinal}"  # a storage's .to() takes the device by keyword only
        rest = [context.segment(item) for item in [*node.args[1:], *node.keywords]]
        replacement = f"{context.segment(function.value)}.to({', '.join([ordinal, *rest])})"
        context.report(self, node, fix=Fix(FixSafety.UNSAFE, replacement=replacement, needs_torch_import=needs_import))

    def _any_device(self, node: ast.Call, context: PythonContext) -> None:
        """`.cuda(value)` with a value of any kind (an ordinal, a device): `.to(value)` where there
        is an accelerator (an int names one of its devices there), the CPU elsewhere."""
        function = node.func
        argument = node.args[0]
        if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
            context.report(self, node)  # 'cuda:N' itself is TP101's
            return
        prefix, needs_import = context.torch_prefix()
        value = context.segment(argument)
        if isinstance(argument, (ast.Name, ast.Attribute, ast.Subscript)):
            # `.cuda(None)` is the current device (`args.gpu` left unset), `.to(None)` would be no move
            value = f"{value} if {value} is not None else {prefix}.accelerator.current_device_index()"
        device = neutral.when_available(prefix, f"({value})" if " if " in value else value, '"cpu"', bare=True)
        if any(isinstance(item, ast.Lambda) for item in context.stack):
            device = f"device={device}"
        rest = [context.segment(item) for item in [*node.args[1:], *node.keywords]]
        replacement = f"{context.segment(function.value)}.to({', '.join([device, *rest])})"
        context.report(self, node, fix=Fix(FixSafety.UNSAFE, replacement=replacement, needs_torch_import=needs_import))
