"""Attention-kernel choices written for CUDA, adapted where they reach torch.

CUDA code restricts `scaled_dot_product_attention` to the kernels a GPU has
(`sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION)`, `torch.backends.cuda.sdp_kernel(enable_math=False)`).
On a target without one of them every call in the region (the application's and its libraries')
fails with "No viable backend". Where the restriction leaves the application, the backends the
target's profile lists (`capabilities.sdpa_backends`) are kept and the exact math backend is added
in place of the ones it lacks; the report says so. A restriction the target can honour is unchanged.
"""

from __future__ import annotations

import contextlib
import warnings

import torch
from torch.nn.attention import SDPBackend

from torchport.retarget import state

__all__ = ["sdpa_kernel", "sdp_kernel"]

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
        "scaled_dot_product_attention kernels",
        f"{', '.join(backend.name for backend in missing)} not on {retarget.backend.name}: ran with "
        f"{', '.join(backend.name for backend in kept)} (its profile's kernels; MATH is exact)",
        kind="adapted",
    )
    return kept


def sdpa_kernel(backends, set_priority: bool = False):
    """`torch.nn.attention.sdpa_kernel` as the application sees it."""
    if isinstance(backends, SDPBackend):
        backends = [backends]
    if isinstance(backends, list):
        backends = _target_backends(list(dict.fromkeys(backends)))
    return _real_sdpa_kernel(backends, set_priority)


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
