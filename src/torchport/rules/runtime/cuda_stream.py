"""TP204: CUDA streams."""

from __future__ import annotations

import ast

from torchport.fix import neutral
from torchport.rules.base import Example, Fix, FixSafety, Severity
from torchport.rules.context import PythonContext
from torchport.rules.patterns import CallRule, guarded_by_availability

__all__ = ["CudaStream"]

#: The stream calls `torch.get_device_module()` answers on every device, `torch.cpu` included.
_NEUTRAL = {"torch.cuda.Stream": "Stream", "torch.cuda.current_stream": "current_stream", "torch.cuda.stream": "stream"}


class CudaStream(CallRule):
    """CUDA streams (data prefetchers, overlap of copy and compute).

    **What it does**: finds `torch.cuda.Stream()`, `torch.cuda.current_stream()`,
    `torch.cuda.default_stream()`, `torch.cuda.stream(...)` and `tensor.record_stream(...)`.

    **Why it matters**: all raise without CUDA; a CUDA-stream data prefetcher is a CUDA-only
    branch with no fallback (idiom I5).

    **Example**:

        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            batch = batch.to(device, non_blocking=True)

    **Use instead**: `torch.get_device_module()`'s `Stream`, `current_stream` and `stream`: the
    accelerator's own, or `torch.cpu`'s, which exist for device-neutral code and do nothing.

    **Fix safety**: safe: `torch.get_device_module()` is `torch.cuda` on CUDA, so the calls are the
    same there; elsewhere the accelerator's streams, or the CPU's no-op ones, instead of a crash.
    `torch.cuda.current_stream().synchronize()` becomes `torch.get_device_module().synchronize()`
    (the CPU's streams cannot synchronize), and `tensor.record_stream(s)`, which the CPU's tensors
    refuse, is made only when `torch.accelerator.is_available()`. `torch.cuda.default_stream()` and
    streams made for another device (`torch.cuda.Stream(device=...)`) are left to a person.
    """

    code = "TP204"
    name = "cuda-stream"
    message = "CUDA stream API raises without CUDA"
    fix_title = "Use torch.get_device_module().Stream / current_stream / stream"
    severity = Severity.ERROR
    fix_safety = FixSafety.SAFE
    triggers = (b"Stream(", b"current_stream", b"default_stream", b".stream(", b"record_stream")
    callees = frozenset(
        {"torch.cuda.Stream", "torch.cuda.current_stream", "torch.cuda.default_stream", "torch.cuda.stream"}
    )
    VALID = (
        "import torch\ns = torch.Stream(device)\n",
        "import torch\nx.record_stream(s) if torch.accelerator.is_available() else None\n",
    )
    INVALID = (
        Example(
            "import torch\ns = torch.cuda.Stream()  # side stream\n",
            fixed="import torch\ns = torch.get_device_module().Stream()  # side stream\n",
        ),
        Example(
            "import torch\nwith torch.cuda.stream(s):\n    pass\n",
            fixed="import torch\nwith torch.get_device_module().stream(s):\n    pass\n",
        ),
        Example(
            "from torch import cuda\ncuda.current_stream().wait_stream(s)\n",
            fixed="from torch import cuda\nimport torch\n\ntorch.get_device_module().current_stream().wait_stream(s)\n",
        ),
        Example(
            "import torch\nx.record_stream(torch.cuda.current_stream())\ntorch.cuda.current_stream().synchronize()\n",
            fixed="import torch\nx.record_stream(torch.get_device_module().current_stream()) if "
            "torch.accelerator.is_available() else None\ntorch.get_device_module().synchronize()\n",
            count=3,
        ),
        Example("import torch\ns = torch.cuda.default_stream()\n", count=1),
    )

    def check(self, node: ast.Call, context: PythonContext) -> None:
        function = node.func
        if isinstance(function, ast.Attribute) and function.attr == "record_stream" and len(node.args) == 1:
            self._record_stream(node, context)
            return
        super().check(node, context)

    def _record_stream(self, node: ast.Call, context: PythonContext) -> None:
        if guarded_by_availability(node, context):
            return
        prefix, needs_import = context.torch_prefix()
        statement = isinstance(context.parent(), ast.Expr)
        replacement = neutral.when_available(prefix, context.segment(node), "None", bare=statement)
        fix = Fix(FixSafety.SAFE, replacement=replacement, needs_torch_import=needs_import)
        context.report(self, node, message="tensor.record_stream() raises for CPU tensors", fix=fix)

    def report_call(self, node: ast.Call, name: str, context: PythonContext) -> None:
        if guarded_by_availability(node, context):
            return
        target = _NEUTRAL.get(name)
        if target is None or (name == "torch.cuda.Stream" and (node.args or any(k.arg != "priority" for k in node.keywords))):
            context.report(self, node)
            return
        prefix, needs_import = context.torch_prefix()
        parent, grandparent = context.parent(), context.parent(2)
        if (
            name == "torch.cuda.current_stream"
            and isinstance(parent, ast.Attribute)
            and parent.attr == "synchronize"
            and isinstance(grandparent, ast.Call)
            and grandparent.func is parent
            and not grandparent.args
            and not grandparent.keywords
        ):
            arguments = ", ".join(context.segment(argument) for argument in [*node.args, *node.keywords])
            fix = Fix(FixSafety.SAFE, replacement=f"{prefix}.get_device_module().synchronize({arguments})",
                      needs_torch_import=needs_import)
            context.report(self, grandparent, fix=fix)
            return
        fix = Fix(FixSafety.SAFE, replacement=f"{prefix}.get_device_module().{target}", needs_torch_import=needs_import)
        context.report(self, node.func, fix=fix)
