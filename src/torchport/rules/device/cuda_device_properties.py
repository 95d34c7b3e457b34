"""TP116: `torch.cuda.get_device_name()` / `get_device_properties()`."""

from __future__ import annotations

import ast

from torchport.rules.base import Severity
from torchport.rules.context import PythonContext
from torchport.rules.patterns import CallRule

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

    **Fix safety**: no automatic fix: the properties asked for (memory, SM count, name) have no
    common meaning across devices, so the code that uses them needs a person.
    """

    code = "TP116"
    name = "cuda-device-properties"
    message = "CUDA device query raises without CUDA"
    fix_title = "Query torch.get_device_module(device) behind an accelerator check"
    severity = Severity.ERROR
    triggers = (b"get_device_name", b"get_device_properties")
    callees = frozenset({"torch.cuda.get_device_name", "torch.cuda.get_device_properties"})
    VALID = (
        "import torch\nname = torch.get_device_module(device).get_device_name(0)\n",
        "import torch\nmajor = torch.cuda.get_device_properties(0).major\n",
    )
    INVALID = (
        "import torch\nprint(torch.cuda.get_device_name(0))\n",
        "import torch\ntotal = torch.cuda.get_device_properties(0).total_memory\n",
    )

    def report_call(self, node: ast.Call, name: str, context: PythonContext) -> None:
        parent = context.parent()
        if isinstance(parent, ast.Attribute) and parent.attr in {"major", "minor"}:
            return
        context.report(self, node)
