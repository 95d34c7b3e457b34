"""`torch.cuda.comm` as the application sees it: single-process copies and reductions between the
devices the application sees, on the target.

`torch.cuda.comm` (torch.nn.parallel.comm) moves tensors between GPUs of one process with CUDA-only
kernels (`torch._C._broadcast`, `_scatter`, `_gather`, NCCL reductions); off CUDA every one of them
fails ("module 'torch._C' has no attribute '_broadcast'", "reduce_add expects all inputs to be on
GPUs"). Here each is the same data movement written with tensor copies and additions on the target's
devices, with CUDA's results: a tensor broadcast to its own device is returned itself, the others get
copies; scatter's chunks are views where they stay on their device; a reduction adds in input order;
`gather(..., destination=-1)` gathers on the host.
"""

from __future__ import annotations

import torch

from torchport.retarget import state

__all__ = ["broadcast", "broadcast_coalesced", "reduce_add", "reduce_add_coalesced", "scatter", "gather"]


def _device(value):
    """A CUDA device value (ordinal, 'cuda:N', torch.device) -> the target device it stands for."""
    from torchport.retarget.runtime import map_device

    mapped = map_device(value)
    return torch.device(mapped) if isinstance(mapped, str) else mapped


def _current():
    """The device torch.cuda.current_device() names (CUDA's default destination)."""
    retarget = state.current()
    return retarget.device(retarget.current_ordinal)


def _copies(tensor: torch.Tensor, devices) -> tuple[torch.Tensor, ...]:
    """`tensor` on each of `devices`: itself on the first device it is already on, a copy elsewhere."""
    results, kept = [], False
    for device in map(_device, devices):
        if not kept and tensor.device == device:
            results.append(tensor)
            kept = True
        else:
            results.append(tensor.to(device, copy=True))
    return tuple(results)


def broadcast(tensor, devices=None, *, out=None):
    state.current().redirected("torch.cuda.comm.broadcast")
    if (devices is None) == (out is None):
        raise RuntimeError(f"Exactly one of 'devices' and 'out' must be specified, but got devices={devices} "
                           f"and out={out}")
    if out is not None:
        for destination in out:
            destination.copy_(tensor)
        return tuple(out)
    return _copies(tensor, devices)


def broadcast_coalesced(tensors, devices, buffer_size=10485760):
    state.current().redirected("torch.cuda.comm.broadcast_coalesced")
    per_tensor = [_copies(tensor, devices) for tensor in tensors]
    return tuple(tuple(copies[index] for copies in per_tensor) for index in range(len(list(devices))))


def reduce_add(inputs, destination=None):
    state.current().redirected("torch.cuda.comm.reduce_add")
    inputs = list(inputs)
    target = _current() if destination is None else _device(destination)
    for index, tensor in enumerate(inputs[1:], 1):
        if tensor.size() != inputs[0].size():
            raise ValueError(f"input {index} has invalid size: got {list(tensor.size())}, but expected "
                             f"{list(inputs[0].size())}")
    result = inputs[0].to(target, copy=True)
    for tensor in inputs[1:]:
        result.add_(tensor.to(target))
    return result


def reduce_add_coalesced(inputs, destination=None, buffer_size=10485760):
    state.current().redirected("torch.cuda.comm.reduce_add_coalesced")
    per_device = [list(tensors) for tensors in inputs]
    return tuple(reduce_add([tensors[index] for tensors in per_device], destination)
                 for index in range(len(per_device[0])))


def scatter(tensor, devices=None, chunk_sizes=None, dim=0, streams=None, *, out=None):
    state.current().redirected("torch.cuda.comm.scatter")
    if out is not None:
        sizes = chunk_sizes or [destination.size(dim) for destination in out]
        for destination, chunk in zip(out, tensor.split(list(sizes), dim)):
            destination.copy_(chunk)
        return tuple(out)
    devices = list(devices)
    chunks = tensor.split(list(chunk_sizes), dim) if chunk_sizes is not None else tensor.chunk(len(devices), dim)
    return tuple(chunk.to(_device(device)) for chunk, device in zip(chunks, devices))


def gather(tensors, dim=0, destination=None, *, out=None):
    state.current().redirected("torch.cuda.comm.gather")
    tensors = list(tensors)
    if out is not None:
        return torch.cat([tensor.to(out.device) for tensor in tensors], dim, out=out)
    if destination == -1:
        target = torch.device("cpu")
    else:
        target = _current() if destination is None else _device(destination)
    return torch.cat([tensor.to(target) for tensor in tensors], dim)
