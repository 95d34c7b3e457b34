"""torch.save / torch.load of emulated device tensors.

Saving needs nothing special: device storages point at their host bytes, so torch.save copies
them to the host like any accelerator's. Loading a storage tagged ``emulated:0`` would ask PyTorch
for a device allocation, which a Python backend cannot provide; the deserializer registered here
wraps the loaded host bytes in a device storage instead. ``map_location="cpu"`` keeps working.
"""

from __future__ import annotations

import torch

from torchport.emulated.state import DEVICE_TYPE as _DEVICE_TYPE

__all__ = ["install", "restore_on_device"]



def _tag(storage) -> str | None:
    return None


def restore_on_device(storage, location: str):
    """Deserializer: a device storage holding `storage`'s bytes, for locations on the emulated device."""
    if not location.startswith(_DEVICE_TYPE):
        return None
    from torchport.emulated.storage import adopt_host_storage

    host = storage if isinstance(storage, torch.UntypedStorage) else storage.untyped()
    if host.device.type != "cpu":
        host = host.cpu()
    return adopt_host_storage(host)


def install() -> None:
    """Register the deserializer ahead of PyTorch's generic PrivateUse1 one."""
    torch.serialization.register_package(5, _tag, restore_on_device)
