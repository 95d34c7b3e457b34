"""Autocast on the emulated device: ``torch.autocast("emulated")`` really casts.

PyTorch registers no autocast kernels for PrivateUse1, so without these the context manager is
accepted and nothing changes precision. The policy is the emulated target's: its profile's
`autocast` lists (CUDA's for cuda-emulated; the CPU's, PyTorch's policy for a device without lists
of its own, where a profile states none: an AMP run then matches the same run on the CPU bit for
bit), read at each call, so the active profile decides.
"""

from __future__ import annotations

import torch

from torchport.autocast_policy import make_kernel, policy, resolve
from torchport.emulated.state import DEVICE_TYPE as _DEVICE_TYPE
from torchport.emulated.state import state

__all__ = ["install"]

_AUTOCAST_KEY = torch._C.DispatchKey.AutocastPrivateUse1
_libraries: list = []


def _kind_for(name: str):
    def kind_of():
        return state.autocast_policy.get(name)

    return kind_of


def install() -> int:
    """Register the autocast kernels for the emulated device (every op a profile's lists name);
    returns how many were registered."""
    from torchport.profiles import load

    # Ops outside the lists pass through autocast unchanged; PyTorch registers no such fallthrough
    # for PrivateUse1, so without it every op fails inside torch.autocast.
    fallthrough = torch.library.Library("_", "IMPL")
    fallthrough.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
    library = torch.library.Library("aten", "IMPL")
    _libraries.extend([fallthrough, library])
    count = 0
    for name in sorted({*policy(load("cpu")), *policy(load("cuda"))}):
        op = resolve(name)
        if op is None:
            continue
        library.impl(name, make_kernel(op, _kind_for(name), _DEVICE_TYPE, _AUTOCAST_KEY, name), "AutocastPrivateUse1",
                     with_keyset=True)
        count += 1
    return count
