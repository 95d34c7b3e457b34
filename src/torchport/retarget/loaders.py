"""Libraries that load tensors straight onto a device named in the call, and know only some devices.

`safetensors.torch.load_file(path, device="cuda")` (and `safe_open(..., device=...)`) hand the
device to safetensors' own loader, which takes a device *name* (a string or a CUDA ordinal, not a
`torch.device`) of the types it knows. The target's name there is a profile fact
(`frameworks.safetensors`; an emulated device has none). Where the call leaves the application the
device is the target, written as that name; where safetensors has none for the target (Neuron, an
emulated device), the tensors are loaded on the host and `load_file`'s result moved to the target,
as a hand port would do; `safe_open` hands back host tensors (the report says so: the application moves them,
or `load_state_dict` copies them into the model's tensors on the target).
"""

from __future__ import annotations

import torch

from torchport.retarget import frameworks, state

__all__ = ["safetensors_call"]


def safetensors_call(function, site: int, args: tuple, kwargs: dict):
    """A safetensors call leaving the application, its `device=` already mapped to the target."""
    device = kwargs.get("device")
    if not isinstance(device, (str, torch.device)):
        return function(*args, **kwargs)
    device = torch.device(device)
    retarget = state.current()
    own = frameworks.framework_names(retarget.backend).get("safetensors")
    if own is not None or device.type != retarget.type:  # a device safetensors knows, or not the target
        name = own if device.type == retarget.type else device.type
        kwargs["device"] = name if device.index is None else f"{name}:{device.index}"
        return function(*args, **kwargs)
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
