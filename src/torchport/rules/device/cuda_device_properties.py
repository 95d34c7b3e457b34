"""TP116: `torch.cuda.get_device_name()` / `get_device_properties()`."""

from __future__ import annotations

import ast

from torchport.fix import neutral
from torchport.rules.base import Example, Fix, FixSafety, Severity
from torchport.rules.context import PythonContext
from torchport.rules.patterns import CallRule


def cuda_guarded(node: ast.AST, context: PythonContext) -> bool:
    """Whether `node` is the value of `node if ...cuda.is_available() else ...` (the fixes' form)."""
    parent = context.parent()
    return isinstance(parent, ast.IfExp) and parent.body is node and "cuda.is_available" in context.segment(parent.test)


def cuda_or(node: ast.AST, otherwise: str, context: PythonContext, helper: str | None = None) -> Fix:
    """Unsafe fix: `node` on CUDA, `otherwise` elsewhere (spelled with the file's torch)."""
    prefix, needs_import = context.torch_prefix()
    replacement = f"({context.segment(node)} if {prefix}.cuda.is_available() else {otherwise})"
    return Fix(FixSafety.UNSAFE, replacement=replacement, needs_torch_import=needs_import, helper=helper)

__all__ = ["CudaDeviceProperties"]


class CudaDeviceProperties(CallRule):
    """Device name and property queries on `torch.cuda` raise without CUDA.

    **What it does**: finds `torch.cuda.get_device_name()` and `torch.cuda.get_device_properties()`
    (reading `.major` / `.minor` of the properties is a capability check, TP407).

    **Why it matters**: logging and memory-sizing code calls them unconditionally and crashes.

    **Example**:

        total = torch.cuda.get_device_properties(0).total_memory

    **Use instead**: `torch.get_device_module(device).get_device_properties(...)` behind a
    `device.type != "cpu"` guard, or skip the query.

    **Fix safety**: unsafe. The properties asked for (memory, SM count, name) have no common meaning
    across devices, so the query stays CUDA's where CUDA is available, and elsewhere answers for
    the host: `_host_device_properties()`, a function the fix writes once into the module, gives the
    processor's name, the machine's memory (`total_memory`), its core count
    (`multi_processor_count`) and capability 0.0. Code that sizes batches from GPU memory then
    sizes them from host memory: check it.
    """

    code = "TP116"
    name = "cuda-device-properties"
    message = "CUDA device query raises without CUDA"
    fix_title = "Query torch.get_device_module(device) behind an accelerator check"
    severity = Severity.ERROR
    fix_safety = FixSafety.UNSAFE
    unsafe_reason = "without CUDA the query answers for the host (processor name, memory, cores)"
    triggers = (b"get_device_name", b"get_device_properties")
    callees = frozenset({"torch.cuda.get_device_name", "torch.cuda.get_device_properties"})
    VALID = (
        "import torch\nname = torch.get_device_module(device).get_device_name(0)\n",
        "import torch\nmajor = torch.cuda.get_device_properties(0).major\n",
    )
    INVALID = (
        "import torch\nprint(torch.cuda.get_device_name(0))\n",
        Example(
            "import torch\n\ntotal = torch.cuda.get_device_properties(0).total_memory\n",
            fixed="import torch\n\n\n"
            + neutral.HELPERS["_host_device_properties"].code
            + "\n\ntotal = (torch.cuda.get_device_properties(0) if torch.cuda.is_available() else "
            "_host_device_properties(0)).total_memory\n",
        ),
    )

    def report_call(self, node: ast.Call, name: str, context: PythonContext) -> None:
        parent = context.parent()
        if isinstance(parent, ast.Attribute) and parent.attr in {"major", "minor"}:
            return
        if cuda_guarded(node, context):
            return
        arguments = ", ".join(context.segment(argument) for argument in node.args[:1])
        host = f"_host_device_properties({arguments})"
        if name.endswith("get_device_name"):
            host += ".name"
        context.report(self, node, fix=cuda_or(node, host, context, helper="_host_device_properties"))
