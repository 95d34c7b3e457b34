"""CUDA's autocast op lists in the application's CUDA autocast regions, on the target.

The application's `autocast("cuda")` asks for CUDA's autocast, whose lists run softmax, log_softmax,
layer_norm, group_norm, exp, pow, logsumexp, the norms and the sums in float32 under float16 or
bfloat16 (a VAE's KL term, `logvar.exp()` near 12, stays finite; attention probabilities are
float32), and promote mixed inputs of scatter_add, dot, bilinear, index_put and a few others to the
widest. On the target the region is the target's genuine autocast (`amp.autocast`), whose lists
differ: the CPU's runs those ops in the dtype they receive. From the application's first CUDA region
on, each op CUDA's lists cast and the target's leave alone gets a kernel on the target's autocast key
that casts as CUDA's does (`torchport.autocast_policy` makes the kernels), in every region of the
target's autocast: the application's CUDA regions, and the regions torch opens again for them
(activation checkpointing's recomputation in backward, `custom_bwd`) or a library opens (on a GPU
machine these are CUDA's). The application's own regions of the target's autocast by name
(`torch.autocast("cpu")` in its code) keep the target's lists. Ops the target's lists cast and CUDA's
leave alone keep the target's cast (more precision, not less). On the emulated device its own
kernels take CUDA's lists likewise (`emulated.autocast`). A function torch.compile traces gets the
casts in its graph. Targets whose autocast kernels torchport does not hold (XLA, MPS, Neuron and the
other accelerators) run their own lists, reported at the first region.
"""

from __future__ import annotations

import threading
import warnings

import torch

from torchport.autocast_policy import REFUSED, make_kernel, policy, resolve

__all__ = ["install", "entered", "exited", "own_entered", "own_exited", "in_region"]


class _Regions(threading.local):
    depth = 0


#: The application's own regions of the target's autocast, by name (`torch.autocast("cpu")` in its
#: code), per thread: the target's lists there.
_OWN = _Regions()
_installed: dict[str, object] = {}
_cuda_policy: dict[str, str] = {}
_ready: list[bool] = []
_lock = threading.Lock()


def entered() -> None:
    """An application CUDA autocast region begins: the first one gives the target's autocast CUDA's
    lists from then on, in every region but the application's own regions of the target's autocast.
    Regions torch opens again for the application's computation (activation checkpointing's
    recomputation in backward, `custom_bwd`) and a library's regions are the target's genuine
    autocast, which a thread-bound choice would miss: a recomputation in other dtypes than the
    forward's fails checkpointing's metadata check."""
    if not _ready:
        _prepare()


def exited() -> None:
    """An application CUDA autocast region ends (nothing to undo: see `entered`)."""


def own_entered() -> None:
    """An application region of the target's own autocast, by name, begins in this thread."""
    _OWN.depth += 1


def own_exited() -> None:
    if _OWN.depth:
        _OWN.depth -= 1


def in_region() -> bool:
    """Whether CUDA's lists apply here now."""
    return bool(_ready) and not _OWN.depth


def _prepare() -> None:
    from torchport.retarget import state

    with _lock:
        if _ready:
            return
        retarget = state.current()
        if not install(retarget):
            retarget.decide("cuda autocast op lists",
                            f"{retarget.backend.name}'s own autocast lists run in the application's CUDA autocast "
                            "regions (CUDA's compute softmax, layer_norm, exp, pow and the sums in float32 under "
                            "float16 or bfloat16; the target's may not)", kind="adapted")
        _ready.append(True)


def _cuda() -> dict[str, str]:
    if not _cuda_policy:
        from torchport.profiles import load

        _cuda_policy.update(policy(load("cuda")))
    return _cuda_policy


def install(retarget) -> bool:
    """Give the target's autocast CUDA's lists in the application's regions; False where the target's
    autocast kernels are not torchport's to extend (reported when a region runs there)."""
    if retarget.type == "cpu":
        if "cpu" not in _installed:
            own = policy(retarget.backend.profile())
            library = torch.library.Library("aten", "IMPL")
            for name, kind in _cuda().items():
                op = resolve(name)
                if op is None or (name in own and kind != REFUSED):
                    continue
                # a refusal replaces the CPU's own kernel, whose cast the application's CPU regions keep
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    library.impl(name, make_kernel(op, _outside_own_regions(kind, own.get(name)), "cpu",
                                                   torch._C.DispatchKey.AutocastCPU, name),
                                 "AutocastCPU", with_keyset=True)
            _installed["cpu"] = library
        return True
    from torchport.emulated.state import DEVICE_TYPE

    if retarget.type == DEVICE_TYPE:
        from torchport.emulated import autocast as emulated_autocast

        emulated_autocast.region_policy = lambda: None if _OWN.depth else _cuda()
        return True
    return False


def _outside_own_regions(kind: str, own: str | None = None):
    def kind_of():
        return own if _OWN.depth else kind

    return kind_of
