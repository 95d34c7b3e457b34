"""`torchport run --compile`: the application's models are compiled as they are moved to the device.

A model is compiled in place (`attach`: same object, state_dict, hooks and methods) when the
application's own code (a file in the retarget scope) moves a module with parameters to the target
with `.to(...)` or `.cuda()`. The run report gets a `compile` section and the summary a line per
model: compilations, bucket hits, host fallbacks, compile time, and what ran eagerly and why.
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
    original_to = torch.nn.Module.to
    device_type = retarget.backend.device_type

    def to(self, *args, **kwargs):
        result = original_to(self, *args, **kwargs)
        if "forward" in self.__dict__ or not any(True for _ in self.parameters()):
            return result
        first = next(self.parameters())
        if first.device.type == device_type and _application_frame(retarget.scope):
            runners.append((type(self).__name__, attach(self, target=retarget.backend, **options)))
        return result

    torch.nn.Module.to = to
    _report_into(retarget.recorder, runners)
    return runners


def _report_into(recorder, runners) -> None:
    """Add the compile section to the run report and the summary (the recorder is observed, not changed)."""
    to_dict = recorder.to_dict
    summary = recorder.summary

    def with_compile() -> dict:
        data = to_dict()
        data["compile"] = [{"model": name, **runner.report.to_dict()} for name, runner in runners]
        return data

    def summary_with_compile() -> str:
        lines = [summary()]
        if not runners:
            lines.append("  compile: no model was moved to the device by the application, nothing compiled")
        lines += [f"  compile {name}: {runner.report.summary()}" for name, runner in runners]
        return "\n".join(lines)

    recorder.to_dict = with_compile
    recorder.summary = summary_with_compile
