"""Libraries that load tensors straight onto a device named in the call, and know only some devices.

`safetensors.torch.load_file(path, device="cuda")` (and `safe_open(..., device=...)`) hand the
device to safetensors' own loader, which takes a device *name* (a string or a CUDA ordinal, not a
`torch.device`) of the types it lists (`_SAFETENSORS_TYPES`: a fact about safetensors, from its
`Device` parser). Where the call leaves the application the device is mapped to the target as for
torch, written as a string; where safetensors has no such device type (Neuron, an emulated
device), the tensors are loaded on the host and `load_file`'s result moved to the target, as a hand
port would do; `safe_open` hands back host tensors (the report says so: the application moves them,
or `load_state_dict` copies them into the model's tensors on the target).
"""

from __future__ import annotations

import torch

from torchport.retarget import state

__all__ = ["safetensors_call"]

#: Device types safetensors' loader accepts (its `Device` parser: cpu, cuda, mps, npu, xpu, xla, mlu,
#: hpu, musa); any other raises "device ... is invalid".
_SAFETENSORS_TYPES = frozenset(("cpu", "cuda", "mps", "npu", "xpu", "xla", "mlu", "hpu", "musa"))


def safetensors_call(function, site: int, args: tuple, kwargs: dict):
    """A safetensors call leaving the application, its `device=` already mapped to the target."""
    device = kwargs.get("device")
    if not isinstance(device, (str, torch.device)):
        return function(*args, **kwargs)
    device = torch.device(device)
    if device.type in _SAFETENSORS_TYPES:
        kwargs["device"] = str(device)
        return function(*args, **kwargs)
    retarget = state.current()
    name = getattr(function, "__qualname__", getattr(function, "__name__", "safetensors"))
    kwargs["device"] = "cpu"
    if name != "load_file":
        retarget.decide(f"safetensors {name}(device=...)",
                        f"loads on the host: safetensors has no {device.type!r} device; its tensors stay "
                        "on the host until moved (load_state_dict copies them to the target)", kind="device")
        return function(*args, **kwargs)
    retarget.decide("safetensors load_file(device=...)",
                    f"loaded on the host and moved to {device} (safetensors has no {device.type!r} device)",
                    kind="device")
    loaded = function(*args, **kwargs)
    return {key: tensor.to(device) for key, tensor in loaded.items()}
