"""Attention-kernel choices written for CUDA, adapted where they reach torch.

CUDA code restricts `scaled_dot_product_attention` to the kernels a GPU has
(`sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION)`, `torch.backends.cuda.sdp_kernel(enable_math=False)`).
On a target without one of them every call in the region (the application's and its libraries')
fails with "No viable backend". Where the restriction leaves the application, the backends the
target's profile lists (`capabilities.sdpa_backends`) are kept and the exact math backend is added
in place of the ones it lacks; the report says so, once for each restriction. A restriction the
target can honour is unchanged. Inside an adapted region the application's
`torch.backends.cuda.*_sdp_enabled()` read the kernels it asked for, as on a GPU. The global
switches (`torch.backends.cuda.enable_flash_sdp(False)`) are adapted alike where they leave none of
the target's kernels.
"""

from __future__ import annotations

import contextlib
import warnings

import torch
from torch.nn.attention import SDPBackend

from torchport.retarget import state

__all__ = ["sdpa_kernel", "sdp_kernel", "FLAG_READERS", "FLAG_SWITCHES"]

_real_sdpa_kernel = torch.nn.attention.sdpa_kernel


def _target_backends(requested: list) -> list:
    retarget = state.current()
    if retarget is None or retarget.type == "cuda":
        return requested
    available = {getattr(SDPBackend, name) for name in retarget.backend.sdpa_backends}
    missing = [backend for backend in requested if backend not in available]
    if not missing:
        return requested
    kept = [backend for backend in requested if backend in available]
    if SDPBackend.MATH not in kept:
        kept.append(SDPBackend.MATH)
    retarget.decide(
        f"scaled_dot_product_attention kernels {'/'.join(backend.name for backend in requested)}",
        f"{', '.join(backend.name for backend in missing)} not on {retarget.backend.name}: the region allows "
        f"{', '.join(backend.name for backend in kept)} (its profile's kernels; MATH is exact)",
        kind="adapted",
    )
    return kept


#: The kernels the application asked for in the regions it is in, innermost last (None: a region
#: the target honours as asked, whose flags torch's own readers give).
_asked: list[frozenset | None] = []


@contextlib.contextmanager
def _region(context, asked: frozenset | None):
    with context as entered:
        _asked.append(asked)
        try:
            yield entered
        finally:
            _asked.pop()


def sdpa_kernel(backends, set_priority: bool = False):
    """`torch.nn.attention.sdpa_kernel` as the application sees it."""
    if isinstance(backends, SDPBackend):
        backends = [backends]
    if isinstance(backends, list):
        requested = list(dict.fromkeys(backends))
        kept = _target_backends(requested)
        return _region(_real_sdpa_kernel(kept, set_priority), frozenset(requested) if kept is not requested else None)
    return _real_sdpa_kernel(backends, set_priority)


#: The kernels the application switched on or off globally (`torch.backends.cuda.enable_math_sdp(False)`).
_switched: dict[SDPBackend, bool] = {}


def _enabled_reader(name: str, backend: SDPBackend):
    real = getattr(torch.backends.cuda, name)

    def enabled() -> bool:
        if _asked and _asked[-1] is not None:
            return backend in _asked[-1]
        return _switched.get(backend, real())

    enabled.__name__ = name
    enabled.__doc__ = real.__doc__
    return enabled


#: `torch.backends.cuda.<reader>` -> the kernel it reads, for the application's facade.
_READERS = tuple(
    (name, backend) for name, backend in (("flash_sdp_enabled", SDPBackend.FLASH_ATTENTION),
                                          ("mem_efficient_sdp_enabled", SDPBackend.EFFICIENT_ATTENTION),
                                          ("math_sdp_enabled", SDPBackend.MATH),
                                          ("cudnn_sdp_enabled", SDPBackend.CUDNN_ATTENTION))
    if hasattr(torch.backends.cuda, name)
)
FLAG_READERS = {name: _enabled_reader(name, backend) for name, backend in _READERS}


def _switch(name: str, backend: SDPBackend):
    """`torch.backends.cuda.enable_<kernel>_sdp(enabled)` as the application sees it. A global choice
    that leaves none of the target's kernels (modded-nanogpt keeps only cuDNN attention: flash and
    math off) keeps the exact math kernel on there, reported, instead of every attention call failing
    with "No viable backend"; the application's readers see what it switched."""
    real_setters = {other: getattr(torch.backends.cuda, setter) for setter, other in _SWITCHES.values()}
    real_readers = {other: getattr(torch.backends.cuda, reader) for reader, other in _READERS}

    def enable(enabled: bool) -> None:
        _switched[backend] = bool(enabled)
        for other, setter in real_setters.items():
            if other in _switched:  # the ones the application switched (MATH back off once it leaves one)
                setter(_switched[other])
        retarget = state.current()
        if retarget is None or retarget.type == "cuda":
            return
        on = [other for other in real_setters if _switched.get(other, other in real_readers and real_readers[other]())]
        available = {getattr(SDPBackend, kernel) for kernel in retarget.backend.sdpa_backends}
        if on and available.isdisjoint(on):
            real_setters[SDPBackend.MATH](True)
            retarget.decide(
                "scaled_dot_product_attention kernels switched globally",
                f"the kernels the application leaves on (torch.backends.cuda.enable_*_sdp) are none of "
                f"{retarget.backend.name}'s: MATH kept on as well (exact; the application's "
                f"torch.backends.cuda readers see what it switched)", kind="adapted")

    enable.__name__ = name
    enable.__doc__ = getattr(torch.backends.cuda, name).__doc__
    return enable


#: `torch.backends.cuda.<switch>` -> (its setter's name, the kernel it switches).
_SWITCHES = {
    name: (name, backend)
    for name, backend in (("enable_flash_sdp", SDPBackend.FLASH_ATTENTION),
                          ("enable_mem_efficient_sdp", SDPBackend.EFFICIENT_ATTENTION),
                          ("enable_math_sdp", SDPBackend.MATH),
                          ("enable_cudnn_sdp", SDPBackend.CUDNN_ATTENTION))
    if hasattr(torch.backends.cuda, name)
}
FLAG_SWITCHES = {name: _switch(name, backend) for name, (_, backend) in _SWITCHES.items()}


@contextlib.contextmanager
def _sdp_kernel(enable_flash: bool, enable_math: bool, enable_mem_efficient: bool, enable_cudnn: bool):
    flags = ((enable_flash, SDPBackend.FLASH_ATTENTION), (enable_mem_efficient, SDPBackend.EFFICIENT_ATTENTION),
             (enable_math, SDPBackend.MATH), (enable_cudnn, SDPBackend.CUDNN_ATTENTION))
    with sdpa_kernel([backend for enabled, backend in flags if enabled]) as context:
        yield context


def sdp_kernel(enable_flash: bool = True, enable_math: bool = True, enable_mem_efficient: bool = True,
               enable_cudnn: bool = True):
    """The deprecated `torch.backends.cuda.sdp_kernel`, with torch's own deprecation warning."""
    warnings.warn(
        "`torch.backends.cuda.sdp_kernel()` is deprecated. In the future, this context manager will be removed. "
        "Please see `torch.nn.attention.sdpa_kernel()` for the new context manager, with updated signature.",
        FutureWarning, stacklevel=2,
    )
    return _sdp_kernel(enable_flash, enable_math, enable_mem_efficient, enable_cudnn)
