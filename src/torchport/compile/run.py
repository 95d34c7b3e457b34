"""`torchport run --compile`: the application's models are compiled as they are moved to the device.

A model is compiled in place (`attach`: same object, state_dict, hooks and methods) when the
application's own code (a file in the retarget scope) moves a module with parameters to the target
with `.to(...)` or `.cuda()`. Each model's CompileReport goes to the run recorder, whose report has a
`compile` section and whose summary a compile block: compilations, bucket hits, host fallbacks,
compile time, and what could not be compiled or padded and why.
"""

from __future__ import annotations

import os
import sys

import torch

from torchport.compile.api import Runner, attach

__all__ = ["install"]

_TORCHPORT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_TORCH_ROOT = os.path.dirname(torch.__file__) + os.sep


def _application_frame(scope: list[str]) -> bool:
    """Whether the nearest caller outside torch and torchport lies in the application's scope."""
    frame = sys._getframe(2)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith((_TORCHPORT_ROOT, _TORCH_ROOT)):
            path = os.path.abspath(filename)
            return any(path.startswith(root.rstrip(os.sep) + os.sep) for root in scope)
        frame = frame.f_back
    return False


def install(retarget, **options) -> list[tuple[str, Runner]]:
    """Compile models the application moves to `retarget`'s device; returns the (name, runner) list it fills."""
    runners: list[tuple[str, Runner]] = []
    # The run report's compile section (retarget/report.py) reads this list.
    compiled = retarget.recorder.compiled_models = []
    original_to = torch.nn.Module.to
    device_type = retarget.backend.device_type

    def to(self, *args, **kwargs):
        result = original_to(self, *args, **kwargs)
        if "forward" in self.__dict__ or not any(True for _ in self.parameters()):
            return result
        first = next(self.parameters())
        if first.device.type == device_type and _application_frame(retarget.scope):
            runner = attach(self, target=retarget.backend, **options)
            runners.append((type(self).__name__, runner))
            compiled.append((type(self).__name__, runner.report))
        return result

    torch.nn.Module.to = to
    return runners
