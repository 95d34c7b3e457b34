"""TP302: `DistributedDataParallel(..., device_ids=[...])`."""

from __future__ import annotations

import ast

from torchport.fix import neutral
from torchport.rules.base import Example, Fix, FixSafety, PythonRule, Severity
from torchport.rules.context import PythonContext

__all__ = ["DdpDeviceIds"]

_WRAPPERS = {"torch.nn.parallel.DistributedDataParallel", "torch.nn.DistributedDataParallel"}


class DdpDeviceIds(PythonRule):
    """`device_ids` / `output_device` given to DDP unconditionally.

    **What it does**: finds `DistributedDataParallel` calls that pass `device_ids` or
    `output_device`, by keyword or positionally (`DDP(model, [rank])`).

    **Why it matters**: for CPU modules DDP requires `device_ids=None`; passing `[rank]` fails
    there (21 sites in 6 of 15 projects).

    **Example**:

        model = DDP(model, device_ids=[local_rank])

    **Use instead**: `device_ids=[local_rank] if device.type != "cpu" else None`.

    **Fix safety**: safe: each value `v` becomes `v if torch.accelerator.is_available() else None`,
    the same on a CUDA machine, and what DDP requires for a CPU module.
    """

    code = "TP302"
    name = "ddp-device-ids"
    message = "DDP device_ids must be None for CPU modules"
    fix_title = "Pass device_ids only for accelerator devices (None on CPU)"
    severity = Severity.WARNING
    target_severity = Severity.per_fact("accelerator", {False: Severity.ERROR})
    fix_safety = FixSafety.SAFE
    triggers = (b"device_ids", b"output_device", b"DDP(", b"DistributedDataParallel(")
    node_types = (ast.Call,)
    VALID = (
        "from torch.nn.parallel import DistributedDataParallel as DDP\nm = DDP(model)\n",
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "m = DDP(model, device_ids=[r] if device.type != 'cpu' else None)\n",
    )
    INVALID = (
        Example(
            "import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
            "m = DDP(model, device_ids=[local_rank])\n",
            fixed="import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
            "m = DDP(model, device_ids=[local_rank] if torch.accelerator.is_available() else None)\n",
        ),
        "import torch\nm = torch.nn.parallel.DistributedDataParallel(model, device_ids=[0], output_device=0)\n",
        Example(
            "import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\nm = DDP(model, [0])\n",
            fixed="import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
            "m = DDP(model, [0] if torch.accelerator.is_available() else None)\n",
        ),
    )

    def check(self, node: ast.Call, context: PythonContext) -> None:
        if context.called(node) not in _WRAPPERS:
            return
        # DistributedDataParallel(module, device_ids=None, output_device=None, ...)
        values = [keyword.value for keyword in node.keywords if keyword.arg in ("device_ids", "output_device")]
        values += node.args[1:3]
        for value in values:
            if isinstance(value, ast.IfExp) or isinstance(value, ast.Starred):
                continue
            if isinstance(value, ast.Constant) and value.value is None:
                continue
            prefix, needs_import = context.torch_prefix()
            # a positional argument is followed by a comma: no parentheses needed either
            replacement = neutral.when_available(prefix, context.segment(value), "None", bare=True)
            context.report(self, value, fix=Fix(FixSafety.SAFE, replacement=replacement, needs_torch_import=needs_import))
