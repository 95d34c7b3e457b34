"""TP217: `torch.compile`."""

from __future__ import annotations

from torchport.rules.base import Severity
from torchport.rules.patterns import CallRule

__all__ = ["TorchCompile"]


class TorchCompile(CallRule):
    """`torch.compile` is device-neutral, but each target compiles differently.

    **What it does**: finds calls of `torch.compile(...)`.

    **Why it matters**: Inductor on CPU needs a working C++ compiler; TorchNeuron compiles with
    `backend="neuron"` and static shapes only; XLA recompiles on every new shape. Reported so the
    port plan covers it (61 sites in 6 of 15 projects). Dynamic shapes are TP408.

    **Example**:

        model = torch.compile(model)

    **Use instead**: keep it; check `torchport doctor` for a C++ compiler, and pass the target's
    backend where it needs one.

    **Fix safety**: no automatic fix: which compiler backend and options suit the target is a
    tuning decision.
    """

    code = "TP217"
    name = "torch-compile"
    message = "torch.compile needs a per-target check (C++ compiler on CPU, static shapes on Neuron)"
    fix_title = "Check the target's compile backend and shape requirements"
    severity = Severity.INFO
    target_severity = Severity.per_fact("dynamic shapes", {"rejected": Severity.WARNING})
    triggers = (b"compile(",)
    callees = frozenset({"torch.compile"})
    VALID = ("import re\npattern = re.compile('x')\n",)
    INVALID = ("import torch\nmodel = torch.compile(model)\n",)
