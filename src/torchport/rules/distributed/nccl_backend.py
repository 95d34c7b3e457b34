"""TP301: the 'nccl' process-group backend."""

from __future__ import annotations

import ast

from torchport.fix import neutral
from torchport.rules.base import Example, FixSafety, PythonRule, Severity
from torchport.rules.context import PythonContext, keyword_argument, string_value
from torchport.rules.patterns import neutral_fix

__all__ = ["NcclBackend"]

_INIT = {"torch.distributed.init_process_group", "torch.distributed.new_group"}


class NcclBackend(PythonRule):
    """The NCCL backend exists only for NVIDIA GPUs.

    **What it does**: finds the string `'nccl'` anywhere, and fixes it where it is the backend of
    `init_process_group` / `new_group`.

    **Why it matters**: `init_process_group('nccl')` raises on every other machine; CPU needs
    gloo, Neuron `neuron`, Ascend `hccl`, Intel `xccl` (15 sites in 9 of 15 projects).

    **Example**:

        dist.init_process_group("nccl")

    **Use instead**:

        dist.init_process_group(dist.get_default_backend_for_device(device))

    **Fix safety**: safe for the backend argument of `init_process_group`:
    `get_default_backend_for_device(<best available device>)` is 'nccl' on CUDA and gloo
    on CPU. Other 'nccl' strings (comparisons, configs) are reported only.
    """

    code = "TP301"
    name = "nccl-backend"
    message = "'nccl' backend works only on NVIDIA GPUs"
    fix_title = "Use dist.get_default_backend_for_device(device)"
    severity = Severity.ERROR
    fix_safety = FixSafety.SAFE
    triggers = (b"'nccl'", b'"nccl"')
    node_types = (ast.Call, ast.Constant)
    VALID = (
        "import torch.distributed as dist\ndist.init_process_group(dist.get_default_backend_for_device(d))\n",
        "import torch.distributed as dist\ndist.init_process_group('gloo')\n",
    )
    INVALID = (
        Example(
            "import torch\nimport torch.distributed as dist\ndist.init_process_group('nccl', rank=rank)\n",
            fixed="import torch\nimport torch.distributed as dist\ndist.init_process_group("
            "torch.distributed.get_default_backend_for_device(torch.accelerator.current_accelerator() if "
            'torch.accelerator.is_available() else torch.device("cpu")), rank=rank)\n',
        ),
        Example(
            "import torch.distributed as dist\ndist.init_process_group(backend='nccl')\n",
            fixed="import torch.distributed as dist\nimport torch\n\ndist.init_process_group(backend="
            "torch.distributed.get_default_backend_for_device(torch.accelerator.current_accelerator() if "
            'torch.accelerator.is_available() else torch.device("cpu")))\n',
        ),
        "if args.backend == 'nccl':\n    pass\n",
    )

    def check(self, node: ast.AST, context: PythonContext) -> None:
        if isinstance(node, ast.Constant):
            parent = context.parent()
            owned = isinstance(parent, ast.Call) and context.called(parent) in _INIT
            owned = owned or (isinstance(parent, ast.keyword) and isinstance(context.parent(2), ast.Call)
                              and context.called(context.parent(2)) in _INIT and parent.arg == "backend")
            if string_value(node) == "nccl" and not owned:
                context.report(self, node)
            return
        if context.called(node) not in _INIT:
            return
        keyword = keyword_argument(node, "backend")
        value = keyword.value if keyword else (node.args[0] if node.args else None)
        if string_value(value) != "nccl":
            return
        def backend(torch: str) -> str:
            return f"{torch}.distributed.get_default_backend_for_device({neutral.device(torch, bare=True)})"

        context.report(self, value, fix=neutral_fix(context, backend, FixSafety.SAFE))
