"""TP604: `CUDA_VISIBLE_DEVICES` in shell scripts and configs."""

from __future__ import annotations

import re

from torchport.rules.base import Example, Severity, TextRule
from torchport.rules.patterns import SCRIPT_KINDS

__all__ = ["CudaVisibleDevicesScript"]


class CudaVisibleDevicesScript(TextRule):
    """`CUDA_VISIBLE_DEVICES` set in a launch script or config.

    **What it does**: finds `CUDA_VISIBLE_DEVICES` in shell scripts, Dockerfiles, Makefiles and
    configs (comment lines excluded).

    **Why it matters**: other runtimes ignore it (`NEURON_RT_VISIBLE_CORES`, `ZE_AFFINITY_MASK`,
    `ASCEND_RT_VISIBLE_DEVICES`), so device pinning silently stops working.

    **Example**: `CUDA_VISIBLE_DEVICES=0,1 torchrun --nproc-per-node 2 train.py`

    **Use instead**: the launcher's device assignment, or the target's own variable next to it.

    **Fix safety**: no automatic fix.
    """

    code = "TP604"
    name = "cuda-visible-devices-script"
    message = "CUDA_VISIBLE_DEVICES is ignored by every other runtime"
    fix_title = "Use the launcher's device assignment or the target's own visibility variable"
    severity = Severity.WARNING
    file_kinds = SCRIPT_KINDS
    line_pattern = re.compile(r"\bCUDA_VISIBLE_DEVICES\b")
    VALID = (Example("torchrun --nproc-per-node 2 train.py\n", filename="run.sh"),)
    INVALID = (
        Example("CUDA_VISIBLE_DEVICES=0,1 torchrun train.py\n", filename="run.sh"),
        Example("env:\n  CUDA_VISIBLE_DEVICES: '0'\n", filename="job.yml"),
    )
