"""TP603: `nvidia-smi` in shell scripts, Dockerfiles, Makefiles and configs."""

from __future__ import annotations

import re

from torchport.rules.base import Example, Severity, TextRule
from torchport.rules.patterns import SCRIPT_KINDS

__all__ = ["NvidiaSmiScript"]


class NvidiaSmiScript(TextRule):
    """`nvidia-smi` in a script or config.

    **What it does**: finds `nvidia-smi` in shell scripts, SLURM files, Dockerfiles, Makefiles and
    YAML/INI configs (comment lines excluded).

    **Why it matters**: launch scripts that count GPUs or wait for them with nvidia-smi fail on
    every other machine before Python even starts.

    **Example**: `NGPUS=$(nvidia-smi -L | wc -l)`

    **Use instead**: `python -c "import torch; print(torch.accelerator.device_count())"`, or the
    target's own tool (`neuron-ls`, `xpu-smi`, `npu-smi`).

    **Fix safety**: no automatic fix.
    """

    code = "TP603"
    name = "nvidia-smi-script"
    message = "nvidia-smi exists only with an NVIDIA driver"
    fix_title = "Count devices with torch.accelerator.device_count() or the target's own tool"
    severity = Severity.ERROR
    file_kinds = SCRIPT_KINDS
    line_pattern = re.compile(r"\bnvidia-smi\b")
    VALID = (Example("#!/bin/bash\n# nvidia-smi is not needed\ntorchrun train.py\n", filename="run.sh"),)
    INVALID = (
        Example("#!/bin/bash\nNGPUS=$(nvidia-smi -L | wc -l)\n", filename="launch.sh"),
        Example("steps:\n  - run: nvidia-smi\n", filename="ci.yaml"),
    )
