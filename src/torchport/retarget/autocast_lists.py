"""CUDA's autocast op lists in the application's CUDA autocast regions, on the target.

The application's `autocast("cuda")` asks for CUDA's autocast, whose lists run softmax, log_softmax,
layer_norm, group_norm, exp, pow, logsumexp, the norms and the sums in float32 under float16 or
bfloat16 (a VAE's KL term, `logvar.exp()` near 12, stays finite; attention probabilities are
float32). On the target the region is the target's genuine autocast (`amp.autocast`), whose lists
differ: the CPU's runs those ops in the dtype they receive. Here each op CUDA's lists cast and the
target's leave alone gets a kernel on the target's autocast key that casts as CUDA's does while this
thread is in an application CUDA region and passes the op through elsewhere, so a library's own use
of the target's autocast sees the target's lists (`torchport.autocast_policy` makes the kernels). Ops
the target's lists cast and CUDA's leave alone keep the target's cast (more precision, not less). On
the emulated device its own kernels take CUDA's lists in these regions (`emulated.autocast`). A
function torch.compile traces inside a region gets the casts in its graph; a region written inside
a compiled function is the target's genuine autocast there, with the target's lists. Targets whose
autocast kernels torchport does not hold (XLA, MPS, Neuron and the other accelerators) run their own
lists, reported at the first region.
"""

from __future__ import annotations

import threading

import torch

from torchport.autocast_policy import make_kernel, policy, resolve

__all__ = ["install", "entered", "exited", "in_region"]


class _Regions(threading.local):
    depth = 0


_REGIONS = _Regions()
_installed: dict[str, object] = {}
_cuda_policy: dict[str, str] = {}


def entered() -> None:
    """An application CUDA autocast region begins in this thread (the first one installs the lists)."""
    if not _ready:
        _prepare()
    _REGIONS.depth += 1


_ready: list[bool] = []
_lock = threading.Lock()


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


def exited() -> None:
    if _REGIONS.depth:
        _REGIONS.depth -= 1


def in_region() -> bool:
    return _REGIONS.depth > 0


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
            keys = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)
            for name, kind in _cuda().items():
                op = resolve(name)
                if name in own or op is None:
                    continue
                library.impl(name, make_kernel(op, _in_regions(kind), "cpu", keys), "AutocastCPU")
            _installed["cpu"] = library
        return True
    from torchport.emulated.state import DEVICE_TYPE

    if retarget.type == DEVICE_TYPE:
        from torchport.emulated import autocast as emulated_autocast

        emulated_autocast.region_policy = lambda: _cuda() if _REGIONS.depth else None
        return True
    return False


def _in_regions(kind: str):
    def kind_of():
        return kind if _REGIONS.depth else None

    return kind_of
