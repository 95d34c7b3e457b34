"""TP510: `CUDA_VISIBLE_DEVICES` read or set from Python."""

from __future__ import annotations

import ast

from torchport.rules.base import PythonRule, Severity
from torchport.rules.context import PythonContext

__all__ = ["CudaVisibleDevicesEnv"]


class CudaVisibleDevicesEnv(PythonRule):
    """Device selection through `CUDA_VISIBLE_DEVICES`.

    **What it does**: finds the string `'CUDA_VISIBLE_DEVICES'` in Python code (os.environ,
    os.getenv).

    **Why it matters**: other runtimes ignore it (Neuron reads `NEURON_RT_VISIBLE_CORES`, Intel
    `ZE_AFFINITY_MASK`, Ascend `ASCEND_RT_VISIBLE_DEVICES`), so every process sees every device.

    **Example**:

        os.environ["CUDA_VISIBLE_DEVICES"] = str(local_rank)

    **Use instead**: `torch.accelerator.set_device_index(local_rank)`, or the launcher's own
    device assignment (torchrun).

    **Fix safety**: no automatic fix.
    """

    code = "TP510"
    name = "cuda-visible-devices-env"
    message = "CUDA_VISIBLE_DEVICES is ignored by every other runtime"
    fix_title = "Select the device with torch.accelerator.set_device_index or the launcher"
    severity = Severity.WARNING
    triggers = (b"CUDA_VISIBLE_DEVICES",)
    node_types = (ast.Constant,)
    VALID = ("import os\nrank = os.environ['LOCAL_RANK']\n",)
    INVALID = (
        "import os\nos.environ['CUDA_VISIBLE_DEVICES'] = '0'\n",
        "import os\ngpus = os.getenv('CUDA_VISIBLE_DEVICES', '')\n",
    )

    def check(self, node: ast.Constant, context: PythonContext) -> None:
        if node.value == "CUDA_VISIBLE_DEVICES":
            context.report(self, node)
