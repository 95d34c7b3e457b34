"""`torch.nn.DataParallel` as the application sees it on a target that is not CUDA.

torch's DataParallel splits each batch over the GPUs with CUDA-only collectives (`torch._C._scatter`,
broadcast_coalesced); off CUDA it fails at the first forward on an accelerator, and on the CPU it
keeps no device attributes at all (`output_device` is missing, `device_ids` is empty). Here it is
what it is on a GPU machine with one GPU per target device the application sees: `device_ids` and
`output_device` are CUDA ordinals, the wrapped module runs as one replica on the first device, with
the inputs moved there first as DataParallel's scatter moves them, and its outputs stay there.
Where the application sees more than one device, the batch is not split (reported): torch has no
collectives to split it with off CUDA; DistributedDataParallel uses every device. The functional form,
`torch.nn.parallel.data_parallel(module, inputs, device_ids)`, does the same for one call.
"""

from __future__ import annotations

import itertools

import torch
from torch.utils._pytree import tree_map

from torchport.retarget import state
from torchport.retarget.standin import StandIn, reduce_as_genuine

__all__ = ["DataParallel", "data_parallel"]

_genuine = torch.nn.DataParallel
_genuine_function = torch.nn.parallel.data_parallel


def _to(value, device):
    return value.to(device) if isinstance(value, torch.Tensor) else value


def _replicas(retarget, device_ids) -> int:
    """How many devices DataParallel would use: `device_ids` (None: every device the application
    sees) capped at the devices seen; for more than one, the single replica is reported."""
    visible = len(retarget.visible())
    count = visible if not device_ids else min(len(device_ids), visible)
    if count > 1:
        retarget.decide("DataParallel", f"one replica on {retarget.backend.name} device 0 for {count} devices: "
                                        "torch splits batches with CUDA-only collectives (use "
                                        "DistributedDataParallel to use every device)", kind="adapted")
    return count


def _one_replica(module, device, inputs: tuple, kwargs: dict):
    """`module` called once on `device`, with its inputs moved there as DataParallel's scatter moves them."""
    for tensor in itertools.chain(module.parameters(), module.buffers()):
        if tensor.device != device:
            raise RuntimeError("module must have its parameters and buffers on device "
                               f"{device} (device_ids[0]) but found one of them on device: {tensor.device}")
    return module(*tree_map(lambda value: _to(value, device), inputs),
                  **tree_map(lambda value: _to(value, device), kwargs))


def data_parallel(module, inputs, device_ids=None, output_device=None, dim: int = 0, module_kwargs=None):
    """torch.nn.parallel.data_parallel: torch's on CUDA; one call on the target's first device elsewhere."""
    retarget = state.current()
    if retarget is None or retarget.type == "cuda":
        return _genuine_function(module, inputs, device_ids, output_device, dim, module_kwargs)
    if not isinstance(inputs, tuple):
        inputs = (inputs,) if inputs is not None else ()
    device = retarget.device(0) if _replicas(retarget, device_ids) else torch.device("cpu")
    return _one_replica(module, device, inputs, module_kwargs or {})


class DataParallel(_genuine, metaclass=StandIn, genuine=_genuine):
    """torch.nn.DataParallel: torch's on CUDA; one replica on the target's first device elsewhere."""

    def __init__(self, module, device_ids=None, output_device=None, dim: int = 0):
        retarget = state.current()
        if retarget is None or retarget.type == "cuda":
            super().__init__(module, device_ids, output_device, dim)
            return
        torch.nn.Module.__init__(self)
        torch._C._log_api_usage_once("torch.nn.DataParallel")
        count = _replicas(retarget, device_ids)
        self.module = module
        self.dim = dim
        self.device_ids = list(range(count))
        self.output_device = 0
        self.device_type = retarget.type
        self.src_device_obj = retarget.device(0) if count else torch.device("cpu")

    def forward(self, *inputs, **kwargs):
        if self.device_type == "cuda":
            return super().forward(*inputs, **kwargs)
        return _one_replica(self.module, self.src_device_obj, inputs, kwargs)

    __reduce_ex__ = reduce_as_genuine
