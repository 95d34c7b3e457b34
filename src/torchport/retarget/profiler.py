"""torch.profiler requests for CUDA kernels, adapted where they reach torch.

A program profiling its GPU asks for `ProfilerActivity.CUDA` (`torch.profiler.profile(activities=
[...])`) or `use_cuda=True` / `use_device="cuda"` (`torch.autograd.profiler.profile`). On the target
that becomes the activity of the target's own kernels where its profile names one
(`capabilities.profiler_activity`: XPU, a PrivateUse1 device, ...); where torch has none, the request
is dropped, the CPU side is profiled as asked, and the report says so (torch itself would warn that
CUDA is not available, which contradicts what the application was told).
"""

from __future__ import annotations

import torch

from torchport.retarget import state
from torchport.retarget.state import Retarget

__all__ = ["activities", "use_device", "use_cuda", "emit_nvtx", "supported_activities"]

_CUDA = torch.profiler.ProfilerActivity.CUDA


def _target_activity(retarget: Retarget):
    name = retarget.backend.profiler_activity
    return None if name is None else getattr(torch.profiler.ProfilerActivity, name)


def _dropped(retarget: Retarget, api: str, site) -> None:
    retarget.noop(api, f"torch.profiler records no {retarget.backend.name} kernels: the CPU side is profiled",
                  site)


def supported_activities() -> set:
    """`torch.profiler.supported_activities()` as on a GPU machine: CUDA's activity listed (the
    application's request for it becomes the target's, or is dropped and reported, above)."""
    return {*torch.profiler.supported_activities(), _CUDA}


def activities(retarget: Retarget, site, value):
    """`activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]` (or a dict entry keyed by CUDA)."""
    if retarget.type == "cuda" or not isinstance(value, (list, tuple, set, frozenset)):
        return value
    if not any(item is _CUDA or (isinstance(item, dict) and _CUDA in item) for item in value):
        return value
    target = _target_activity(retarget)
    mapped = []
    for item in value:
        if isinstance(item, dict):
            item = {(target if key is _CUDA else key): filters for key, filters in item.items()
                    if key is not _CUDA or target is not None}
            if item:
                mapped.append(item)
        elif item is not _CUDA:
            mapped.append(item)
        elif target is not None and target not in mapped:
            mapped.append(target)
    if target is None:
        _dropped(retarget, "ProfilerActivity.CUDA", site)
    else:
        retarget.redirected("ProfilerActivity.CUDA", site)
    return type(value)(mapped) if not isinstance(value, (set, frozenset)) else type(value)(
        item for item in mapped if not isinstance(item, dict))


def use_device(retarget: Retarget, site, value):
    """`torch.autograd.profiler.profile(use_device="cuda")`: the target's device, or None (CPU only)."""
    if retarget.type == "cuda" or not isinstance(value, str) or value.split(":")[0] != "cuda":
        return value
    if _target_activity(retarget) is None:
        _dropped(retarget, "use_device='cuda'", site)
        return None
    retarget.redirected("use_device='cuda'", site)
    return retarget.type


def use_cuda(retarget: Retarget, site, function, kwargs: dict) -> None:
    """`use_cuda=True` (the older spelling of use_device="cuda" / of the CUDA activity), rewritten in
    `kwargs` for `function`: torch.autograd.profiler.profile takes use_device, torch.profiler.profile
    takes activities."""
    if retarget.type == "cuda" or kwargs.get("use_cuda") is not True:
        return
    del kwargs["use_cuda"]
    target = _target_activity(retarget)
    if target is None:
        _dropped(retarget, "use_cuda=True", site)
        return
    retarget.redirected("use_cuda=True", site)
    if isinstance(function, type) and issubclass(function, torch.profiler.profile):
        kwargs["activities"] = [*(kwargs.get("activities") or [torch.profiler.ProfilerActivity.CPU]), target]
    elif kwargs.get("use_device") is None:
        kwargs["use_device"] = retarget.type


class emit_nvtx(torch.autograd.profiler.emit_nvtx):  # noqa: N801 - the genuine class's name
    """`with torch.autograd.profiler.emit_nvtx():` marks ops with NVTX ranges for NVIDIA's profilers
    (nsys, nvprof), which do not exist on the target: the block runs unmarked, reported as a no-op
    (torch's own __enter__ synchronizes CUDA and stops on a machine without it)."""

    def __enter__(self):
        retarget = state.current()
        if retarget is None or retarget.type == "cuda" or not self.enabled:
            return super().__enter__()
        if self.entered:
            raise RuntimeError("NVTX annotation context manager is not reentrant")
        retarget.noop("torch.autograd.profiler.emit_nvtx",
                      f"NVTX ranges are read by NVIDIA's profilers (nsys, nvprof): none on {retarget.backend.name}")
        self.entered = True
        self._torchport_unmarked = True
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        if self.__dict__.pop("_torchport_unmarked", False):
            self.entered = False
            return False
        return super().__exit__(exc_type, exc_val, exc_tb)
