"""TP109: `f'cuda:{rank}'` and other device strings built from a rank."""

from __future__ import annotations

import ast

from torchport.rules.base import PythonRule, Severity
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

    **Fix safety**: no automatic fix: the result changes type from str to torch.device.
    """

    code = "TP109"
    name = "cuda-fstring-device"
    message = "Device string built as 'cuda:<rank>' is CUDA-only"
    fix_title = "Use torch.device(accelerator_type, rank)"
    severity = Severity.ERROR
    triggers = (b"cuda:",)
    node_types = (ast.JoinedStr, ast.BinOp, ast.Call)
    VALID = (
        "device = f'{kind}:{rank}'\n",
        "label = f'cudaGraph {name}'\n",
        "d = 'cuda:0'\n",
    )
    INVALID = (
        "device = f'cuda:{local_rank}'\n",
        "device = 'cuda:{}'.format(rank)\n",
        "device = 'cuda:%d' % rank\n",
        "device = 'cuda:' + str(rank)\n",
    )

    def check(self, node: ast.AST, context: PythonContext) -> None:
        if isinstance(node, ast.JoinedStr):
            first = string_value(node.values[0]) if node.values else None
            if first is not None and first.startswith("cuda:") and len(node.values) > 1:
                context.report(self, node)
            return
        if isinstance(node, ast.BinOp):
            text = string_value(node.left)
            if text is not None and text.startswith("cuda:") and isinstance(node.op, (ast.Add, ast.Mod)):
                context.report(self, node)
            return
        function = node.func
        if isinstance(function, ast.Attribute) and function.attr == "format":
            text = string_value(function.value)
            if text is not None and text.startswith("cuda:{"):
                context.report(self, node)
