"""`torch.nn.DataParallel` as the application sees it on a target that is not CUDA.

torch's DataParallel splits each batch over the GPUs with CUDA-only collectives (`torch._C._scatter`,
broadcast_coalesced); off CUDA it fails at the first forward on an accelerator, and on the CPU it
keeps no device attributes at all (`output_device` is missing, `device_ids` is empty). Here it is
what it is on a GPU machine with one GPU per target device the application sees: `device_ids` and
`output_device` are CUDA ordinals, the wrapped module runs as one replica on the first device, with
the inputs moved there first as DataParallel's scatter moves them, and its outputs stay there.
Where the application sees more than one device, the batch is not split (reported): torch has no
collectives to split it with off CUDA; DistributedDataParallel uses every device.
"""

from __future__ import annotations

import itertools

import torch
from torch.utils._pytree import tree_map

from torchport.retarget import state
from torchport.retarget.standin import StandIn, reduce_as_genuine

__all__ = ["DataParallel"]

_genuine = torch.nn.DataParallel


def _to(value, device):
    return value.to(device) if isinstance(value, torch.Tensor) else value


class DataParallel(_genuine, metaclass=StandIn, genuine=_genuine):
    """torch.nn.DataParallel: torch's on CUDA; one replica on the target's first device elsewhere."""

    def __init__(self, module, device_ids=None, output_device=None, dim: int = 0):
        retarget = state.current()
        if retarget is None or retarget.type == "cuda":
            super().__init__(module, device_ids, output_device, dim)
            return
        torch.nn.Module.__init__(self)
        torch._C._log_api_usage_once("torch.nn.DataParallel")
        visible = len(retarget.visible())
        count = visible if not device_ids else min(len(device_ids), visible)
        self.module = module
        self.dim = dim
        self.device_ids = list(range(count))
        self.output_device = 0
        self.device_type = retarget.type
        self.src_device_obj = retarget.device(0) if count else torch.device("cpu")
        if count > 1:
            retarget.decide("DataParallel", f"one replica on {retarget.backend.name} device 0 for {count} devices: "
                                            "torch splits batches with CUDA-only collectives (use "
                                            "DistributedDataParallel to use every device)", kind="adapted")

    def forward(self, *inputs, **kwargs):
        if self.device_type == "cuda":
            return super().forward(*inputs, **kwargs)
        device = self.src_device_obj
        for tensor in itertools.chain(self.module.parameters(), self.module.buffers()):
            if tensor.device != device:
                raise RuntimeError("module must have its parameters and buffers on device "
                                   f"{device} (device_ids[0]) but found one of them on device: {tensor.device}")
        return self.module(*tree_map(lambda value: _to(value, device), inputs),
                           **tree_map(lambda value: _to(value, device), kwargs))

    __reduce_ex__ = reduce_as_genuine
