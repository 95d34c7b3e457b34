"""`torch.nn.SyncBatchNorm` on targets without its kernels: the same statistics, from plain ops.

On CUDA, SyncBatchNorm normalises each channel with the mean and variance of the whole global batch
(every rank's slice), through CUDA-only kernels; on the CPU, PyTorch refuses it outright (and
DistributedDataParallel refuses a CPU module holding one). Where the target's profile says it has no
such kernels (`capabilities.sync_batchnorm`), the application's SyncBatchNorm layers are this
module's `SyncBatchNorm`: the same parameters, buffers, state_dict and arguments, whose training
forward computes the global statistics with two autograd-aware all-reduces (the sums and the count,
then the squared deviations from the global mean: the two-pass variance, stable for large means), so
its outputs, gradients and running statistics are those of CUDA's SyncBatchNorm up to rounding.

The application sees a SyncBatchNorm: `isinstance(m, torch.nn.SyncBatchNorm)` holds, `repr` and
`type(m).__name__` read the same; PyTorch and the libraries see a batch-norm layer that is not
torch's SyncBatchNorm (which is what lets DistributedDataParallel take it on the CPU). A pickled
layer (`torch.save(model)`) loads as torch's SyncBatchNorm where torchport is not installed.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from torchport.retarget import state
from torchport.retarget.standin import StandIn, reduce_as_genuine

__all__ = ["SyncBatchNorm", "NeutralSyncBatchNorm", "adapted"]

_genuine = torch.nn.SyncBatchNorm


def adapted() -> bool:
    """Whether the active target's SyncBatchNorm layers are the neutral ones (its profile has no kernels)."""
    retarget = state.current()
    return retarget is not None and not retarget.backend.supports_sync_batchnorm


def _decide(retarget) -> None:
    retarget.decide("torch.nn.SyncBatchNorm", f"synchronised with all-reduces of plain ops: {retarget.backend.name} "
                                              "has no SyncBatchNorm kernels", kind="adapted")


class NeutralSyncBatchNorm(_BatchNorm):
    """torch.nn.SyncBatchNorm with the global batch statistics computed from plain ops and all-reduces."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, process_group=None, device=None, dtype=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device=device, dtype=dtype)
        self.process_group = process_group

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def _check_non_zero_input_channels(self, input):
        if input.size(1) == 0:
            raise ValueError("SyncBatchNorm number of input channels should be non-zero")

    def forward(self, input):  # torch.nn.SyncBatchNorm.forward, without its device check
        self._check_input_dim(input)
        self._check_non_zero_input_channels(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            factor = 1.0 / self.num_batches_tracked.item() if self.momentum is None else self.momentum
        bn_training = self.training or (self.running_mean is None and self.running_var is None)
        running_mean = self.running_mean if not self.training or self.track_running_stats else None
        running_var = self.running_var if not self.training or self.track_running_stats else None
        group = None
        if bn_training and self.training and torch.distributed.is_available() and torch.distributed.is_initialized():
            group = self.process_group or torch.distributed.group.WORLD
            if torch.distributed.get_world_size(group) <= 1:
                group = None
        if group is None:
            return F.batch_norm(input, running_mean, running_var, self.weight, self.bias, bn_training, factor, self.eps)
        return _synchronised(input, self.weight, self.bias, running_mean, running_var, self.eps, factor, group)

    __reduce_ex__ = reduce_as_genuine  # loads as torch's SyncBatchNorm without torchport

    def __deepcopy__(self, memo):  # a copy (an EMA model) stays this class, unlike a pickle
        clone = object.__new__(type(self))
        memo[id(self)] = clone
        clone.__dict__.update(copy.deepcopy(self.__dict__, memo))
        return clone


NeutralSyncBatchNorm.__name__ = NeutralSyncBatchNorm.__qualname__ = "SyncBatchNorm"
NeutralSyncBatchNorm.__module__ = _genuine.__module__  # what type(layer) reads; pickles go by reduce_as_genuine
NeutralSyncBatchNorm._torchport_genuine = _genuine
NeutralSyncBatchNorm._torchport_standin = NeutralSyncBatchNorm


def _synchronised(input, weight, bias, running_mean, running_var, eps: float, momentum: float, group):
    """Batch norm over the global batch (every rank's `input`), differentiable through the all-reduces."""

    def all_reduce(tensor, group):
        return _AllReduce.apply(tensor, group)

    reduced = (0, *range(2, input.dim()))
    shape = (1, -1) + (1,) * (input.dim() - 2)
    x = input.float() if input.dtype in (torch.float16, torch.bfloat16) else input  # statistics in fp32, as CUDA's
    local_count = x.numel() // x.size(1)
    sums = all_reduce(torch.cat([x.sum(reduced), x.new_full((1,), float(local_count))]), group=group)
    count = sums[-1]
    mean = sums[:-1] / count
    centered = x - mean.view(shape)
    variance = all_reduce((centered * centered).sum(reduced), group=group) / count
    output = centered * torch.rsqrt(variance + eps).view(shape)
    if weight is not None:
        output = output * weight.view(shape) + bias.view(shape)
    if running_mean is not None:
        with torch.no_grad():
            total = float(count)
            unbiased = variance * (total / max(total - 1.0, 1.0))
            running_mean.mul_(1.0 - momentum).add_(mean.to(running_mean.dtype), alpha=momentum)
            running_var.mul_(1.0 - momentum).add_(unbiased.to(running_var.dtype), alpha=momentum)
    return output.to(input.dtype)


class _AllReduce(torch.autograd.Function):
    """A sum over the ranks; its gradient is the sum of the ranks' gradients (each rank's loss depends
    on every rank's input through it), as in the backward of CUDA's SyncBatchNorm."""

    @staticmethod
    def forward(ctx, tensor, group):
        ctx.group = group
        total = tensor.clone()
        torch.distributed.all_reduce(total, group=group)
        return total

    @staticmethod
    def backward(ctx, grad):
        total = grad.clone()
        torch.distributed.all_reduce(total, group=ctx.group)
        return total, None


class _SyncBatchNormType(StandIn):
    """The stand-in's metaclass: the neutral layers are SyncBatchNorms to the application too."""

    def __instancecheck__(cls, instance) -> bool:
        if cls.__dict__.get("_torchport_standin") is cls:
            return isinstance(instance, (_genuine, NeutralSyncBatchNorm))
        return type.__instancecheck__(cls, instance)

    def __subclasscheck__(cls, subclass) -> bool:
        if cls.__dict__.get("_torchport_standin") is cls:
            return issubclass(subclass, (_genuine, NeutralSyncBatchNorm))
        return type.__subclasscheck__(cls, subclass)


class SyncBatchNorm(_genuine, metaclass=_SyncBatchNormType, genuine=_genuine):
    """`torch.nn.SyncBatchNorm` as the application sees it: torch's where the target has the kernels,
    the neutral layer where it has not (reported)."""

    def __new__(cls, *args, **kwargs):
        if cls is SyncBatchNorm and adapted():
            _decide(state.current())
            return NeutralSyncBatchNorm(*args, **kwargs)  # not an instance of cls: __init__ is not run again
        return super().__new__(cls)

    __reduce_ex__ = reduce_as_genuine

    @classmethod
    def convert_sync_batchnorm(cls, module, process_group=None):
        """torch's conversion; on a target without the kernels, the layers it makes are the neutral ones."""
        converted = _genuine.convert_sync_batchnorm(module, process_group)
        if adapted():
            layers = [layer for layer in converted.modules() if type(layer) is _genuine]
            for layer in layers:
                layer.__class__ = NeutralSyncBatchNorm  # same attributes, parameters and buffers
            if layers:
                _decide(state.current())
        return converted
