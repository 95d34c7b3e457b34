"""CUDA's autocast op lists in the application's CUDA autocast regions, on the CPU target.

The application's `autocast("cuda")` asks for CUDA's autocast, whose lists run softmax, log_softmax,
layer_norm, group_norm, exp, pow, logsumexp, the norms and the sums in float32 under float16 or
bfloat16 (a VAE's KL term, `logvar.exp()` near 12, stays finite; attention probabilities are
float32), promote mixed inputs of scatter_add, dot, bilinear, index_put and a few others to the
widest, and refuse binary_cross_entropy. On the CPU target the region is the CPU's genuine autocast
(`amp.autocast`), whose lists differ: it runs those ops in the dtype they receive. From the
application's first CUDA region on (eager, or traced by torch.compile), until retargeting ends, each
op CUDA's lists cast and the CPU's leave alone gets a kernel on the CPU's autocast key that casts as
CUDA's does (`torchport.autocast_policy` makes the kernels), in every region of the CPU's autocast:
the application's, and the regions torch opens again for them (activation checkpointing's
recomputation in backward, `custom_bwd`), whose dtypes must agree with the forward's, and a
library's (on a GPU machine these are CUDA's). Ops the CPU's lists cast and CUDA's leave alone keep
the CPU's cast (more precision, not less).

Other targets run their own lists in these regions, reported at the first one: their autocast
kernels are not torchport's (XLA, MPS, Neuron), and the emulated devices rehearse their target's own
(CUDA's on cuda-emulated).
"""

from __future__ import annotations

import contextlib
import threading
import warnings

import torch

from torchport.autocast_policy import REFUSED, make_kernel, policy, resolve

__all__ = ["arm", "disarm"]

_library: list = []
_lock = threading.Lock()
#: True while CUDA's lists apply (from the first CUDA region until retargeting ends); None before a
#: region was met in this retargeting.
_armed: list[bool] = []


def arm() -> None:
    """An application CUDA autocast region is made (eager or traced): CUDA's lists from now on."""
    if _armed:
        return
    from torchport.retarget import state

    with _lock:
        if _armed:
            return
        retarget = state.current()
        if retarget is None:
            return
        installed = _install(retarget)
        if not installed:
            retarget.decide("cuda autocast op lists",
                            f"{retarget.backend.name}'s own autocast lists run in the application's CUDA autocast "
                            "regions (CUDA's compute softmax, layer_norm, exp, pow and the sums in float32 under "
                            "float16 or bfloat16; the target's may not)", kind="adapted")
        _armed.append(installed)


@contextlib.contextmanager
def _quietly():
    """torch's warning that a kernel is overridden (the CPU's own autocast kernel, replaced while
    CUDA's lists are armed) is not shown, whatever filters the application set (`simplefilter("error")`
    would raise it), and Python keeps what it has shown once per line: the filter list is edited in
    place, as `warnings.filterwarnings` and `catch_warnings` do not (they make Python forget which
    warnings it has shown, so the application's own would show again)."""
    saved = warnings.filters[:]
    warnings.filters.insert(0, ("ignore", None, Warning, None, 0))
    try:
        yield
    finally:
        warnings.filters[:] = saved


def disarm() -> None:
    """Retargeting ends: the CPU's autocast has its own lists again."""
    _armed.clear()


def _install(retarget) -> bool:
    """Give the CPU's autocast CUDA's lists while armed; False on other targets."""
    from torchport.profiles import load

    if retarget.type != "cpu":
        emulated_lists = retarget.backend.profile().data.get("autocast")
        return emulated_lists is not None and emulated_lists == load("cuda").data["autocast"]
    if not _library:
        own = policy(load("cpu"))
        library = torch.library.Library("aten", "IMPL")
        for name, kind in policy(load("cuda")).items():
            op = resolve(name)
            if op is None or (name in own and kind != REFUSED):
                continue
            # a refusal replaces the CPU's own kernel, whose cast applies again once disarmed
            with _quietly():
                library.impl(name, make_kernel(op, _while_armed(kind, own.get(name)), "cpu",
                                               torch._C.DispatchKey.AutocastCPU, name),
                             "AutocastCPU", with_keyset=True)
        _library.append(library)
    return True


def _while_armed(kind: str, own: str | None):
    def kind_of():
        return kind if _armed and _armed[0] else own

    return kind_of
