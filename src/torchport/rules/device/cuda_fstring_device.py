"""TP109: `f'cuda:{rank}'` and other device strings built from a rank."""

from __future__ import annotations

import ast

from torchport.fix import neutral
from torchport.rules.base import Example, Fix, FixSafety, PythonRule, Severity
from torchport.rules.context import PythonContext, string_value

__all__ = ["CudaFstringDevice"]


class CudaFstringDevice(PythonRule):
    """A device string assembled as `'cuda:' + rank` (idiom I5 under DDP).

    **What it does**: finds `f'cuda:{rank}'`, `'cuda:{}'.format(rank)`, `'cuda:%d' % rank` and
    `'cuda:' + str(rank)`.

    **Why it matters**: every process of a distributed job then requires a CUDA device; there is no
    fallback (8 sites in 5 of 15 projects).

    **Example**:

        device = f"cuda:{local_rank}"

    **Use instead**: `torch.device(torch.accelerator.current_accelerator().type, local_rank)`.

    **Fix safety**: unsafe, for `f'cuda:{rank}'` and `'cuda:' + ...`: 'cuda' becomes the type of
    the best available device, so the value stays a string ('cuda:1' on a CUDA machine), and
    `"cpu"` without an accelerator: the CPU has no numbered devices where a device is looked up by
    name (`torch.load(map_location='cpu:0')` raises). The other spellings are reported only.
    """

    code = "TP109"
    name = "cuda-fstring-device"
    message = "Device string built as 'cuda:<rank>' is CUDA-only"
    fix_title = "Use torch.device(accelerator_type, rank)"
    severity = Severity.ERROR
    fix_safety = FixSafety.UNSAFE
    unsafe_reason = "each process uses the local accelerator or the CPU instead of failing without CUDA"
    triggers = (b"cuda:",)
    node_types = (ast.JoinedStr, ast.BinOp, ast.Call)
    VALID = (
        "device = f'{kind}:{rank}'\n",
        "label = f'cudaGraph {name}'\n",
        "d = 'cuda:0'\n",
    )
    INVALID = (
        Example(
            "import torch\ndevice = f'cuda:{local_rank}'\n",
            fixed="import torch\ndevice = torch.accelerator.current_accelerator().type + f':{local_rank}' if "
            "torch.accelerator.is_available() else \"cpu\"\n",
        ),
        Example(
            "import torch\nsnapshot = torch.load(path, map_location=f\"cuda:{gpu_id}\")\n",
            fixed="import torch\nsnapshot = torch.load(path, map_location=torch.accelerator.current_accelerator().type "
            "+ f\":{gpu_id}\" if torch.accelerator.is_available() else \"cpu\")\n",
        ),
        "device = 'cuda:{}'.format(rank)\n",
        "device = 'cuda:%d' % rank\n",
        Example(
            "import torch\ndevice = 'cuda:' + str(rank)\n",
            fixed="import torch\ndevice = torch.accelerator.current_accelerator().type + ':' + str(rank) if "
            "torch.accelerator.is_available() else \"cpu\"\n",
        ),
    )

    def check(self, node: ast.AST, context: PythonContext) -> None:
        if isinstance(node, ast.JoinedStr):
            first = string_value(node.values[0]) if node.values else None
            if first is not None and first.startswith("cuda:") and len(node.values) > 1:
                context.report(self, node, fix=self._fstring_fix(node, context))
            return
        if isinstance(node, ast.BinOp):
            text = string_value(node.left)
            if text is not None and text.startswith("cuda:") and isinstance(node.op, (ast.Add, ast.Mod)):
                fix = None
                if isinstance(node.op, ast.Add):
                    prefix, needs_import = context.torch_prefix()
                    rest = f"{text[len('cuda'):]!r} + {context.segment(node.right)}"
                    replacement = neutral.indexed_code(prefix, rest, bare=_bare(node, context))
                    fix = Fix(FixSafety.UNSAFE, replacement=replacement, needs_torch_import=needs_import)
                context.report(self, node, fix=fix)
            return
        function = node.func
        if isinstance(function, ast.Attribute) and function.attr == "format":
            text = string_value(function.value)
            if text is not None and text.startswith("cuda:{"):
                context.report(self, node)

    @staticmethod
    def _fstring_fix(node: ast.JoinedStr, context: PythonContext) -> Fix | None:
        text = context.segment(node)
        start = min((index for index in (text.find("'"), text.find('"')) if index >= 0), default=-1)
        if start < 0 or "\n" in text or text[start : start + 3] in ("'''", '"""') or "\\" in text:
            return None
        if not text[start + 1 :].startswith("cuda:"):
            return None
        prefix, needs_import = context.torch_prefix()
        suffix = text[: start + 1] + text[start + 1 + len("cuda") :]
        replacement = neutral.indexed_code(prefix, suffix, bare=_bare(node, context))
        return Fix(FixSafety.UNSAFE, replacement=replacement, needs_torch_import=needs_import)


def _bare(node: ast.AST, context: PythonContext) -> bool:
    """Whether `node`, once fixed, may be written without parentheses: it is a whole value (an
    assignment's, a return's or an argument's), not an operand."""
    parent = context.parent()
    if isinstance(parent, (ast.Assign, ast.AnnAssign, ast.Return, ast.keyword)):
        return True
    return isinstance(parent, ast.Call) and any(argument is node for argument in parent.args)
