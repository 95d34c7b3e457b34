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

    **Fix safety**: safe for the backend argument of `init_process_group`, written there or bound
    once to the name passed there (`backend = 'nccl'` ... `init_process_group(backend=backend)`):
    `get_default_backend_for_device(<best available device>)` is 'nccl' on CUDA and gloo
    on CPU. Unsafe for a `default='nccl'` (argparse, config helpers), which becomes the same
    expression. Other 'nccl' strings (comparisons) are reported only.
    """

    code = "TP301"
    name = "nccl-backend"
    message = "'nccl' backend works only on NVIDIA GPUs"
    fix_title = "Use dist.get_default_backend_for_device(device)"
    severity = Severity.ERROR
    fix_safety = FixSafety.SAFE
    unsafe_reason = "the default backend is the one for the local accelerator, or gloo, instead of nccl"
    triggers = (b"'nccl'", b'"nccl"', b"init_process_group", b"new_group")
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
        Example(
            "import torch\nfrom torch.distributed import init_process_group\nbackend = 'nccl' # or 'gloo'\n"
            "init_process_group(backend=backend)\n",
            fixed="import torch\nfrom torch.distributed import init_process_group\nbackend = "
            "torch.distributed.get_default_backend_for_device(torch.accelerator.current_accelerator() if "
            'torch.accelerator.is_available() else torch.device("cpu")) # or \'gloo\'\n'
            "init_process_group(backend=backend)\n",
        ),
        Example(
            "import torch\nparser.add_argument('--backend', default='nccl')\n",
            fixed="import torch\nparser.add_argument('--backend', "
            "default=torch.distributed.get_default_backend_for_device("
            'torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")))\n',
        ),
    )

    def check(self, node: ast.AST, context: PythonContext) -> None:
        if isinstance(node, ast.Constant):
            parent = context.parent()
            owned = isinstance(parent, ast.Call) and context.called(parent) in _INIT
            owned = owned or (isinstance(parent, ast.keyword) and isinstance(context.parent(2), ast.Call)
                              and context.called(context.parent(2)) in _INIT and parent.arg == "backend")
            if string_value(node) == "nccl" and not owned:
                # an argparse or config default: the backend for the best device, 'nccl' on CUDA
                is_default = isinstance(parent, ast.keyword) and parent.arg == "default"
                fix = neutral_fix(context, self._backend, FixSafety.UNSAFE) if is_default else None
                if fix is None and self._names_the_backend(node, context):
                    fix = neutral_fix(context, self._backend, FixSafety.SAFE)
                context.report(self, node, fix=fix)
            return
        if context.called(node) not in _INIT:
            return
        keyword = keyword_argument(node, "backend")
        value = keyword.value if keyword else (node.args[0] if node.args else None)
        if string_value(value) != "nccl":
            return
        context.report(self, value, fix=neutral_fix(context, self._backend, FixSafety.SAFE))

    @staticmethod
    def _names_the_backend(node: ast.Constant, context: PythonContext) -> bool:
        """Whether `node` is the value of `NAME = 'nccl'`, bound once in its module or function, and
        `NAME` is the backend given to `init_process_group` there (nanoGPT's config globals)."""
        statement = context.parent()
        if not (isinstance(statement, ast.Assign) and statement.value is node and len(statement.targets) == 1
                and isinstance(statement.targets[0], ast.Name)):
            return False
        name = statement.targets[0].id
        scope = context.binding_scope()
        if scope is None or len(context.stores(scope, name)) != 1:
            return False
        for call in ast.walk(scope):
            if not isinstance(call, ast.Call) or context.called(call) not in _INIT:
                continue
            keyword = keyword_argument(call, "backend")
            value = keyword.value if keyword else (call.args[0] if call.args else None)
            if isinstance(value, ast.Name) and value.id == name:
                return True
        return False

    @staticmethod
    def _backend(torch: str) -> str:
        return f"{torch}.distributed.get_default_backend_for_device({neutral.device(torch, bare=True)})"
