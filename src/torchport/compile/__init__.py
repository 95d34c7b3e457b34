"""Compile for the target: shape bucketing, explicit host fallback and a placement report.

    import torchport
    fast = torchport.compile(model, buckets="auto", fallback="host", strict=False)
    torch.compile(model, backend="torchport")       # placement and fallback, no bucketing

Split by concern: `backend` (the Dynamo backend and target resolution), `placement` (which ops run
where; host partitions), `bucketing` (padding, the safety probe, slicing), `report` (the placement
and compilation report), `api` (`compile` and `CompiledModule`).
"""

from __future__ import annotations

import sys
import types

from torchport.compile.api import PRECISIONS, CompiledModule, Runner, attach, compile, detach
from torchport.compile.backend import CompileFallbackError, TorchportBackend, backend_report, torchport_backend
from torchport.compile.report import CompileReport, OpPlacement

__all__ = [
    "compile", "attach", "detach", "Runner", "CompiledModule", "CompileReport", "OpPlacement", "CompileFallbackError", "TorchportBackend",
    "torchport_backend", "backend_report", "PRECISIONS",
]


class _CallableModule(types.ModuleType):
    """This package's module type: `torchport.compile(model)` calls `compile`."""

    def __call__(self, *args, **kwargs):
        return compile(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
