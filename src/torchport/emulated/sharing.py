"""Sending emulated device tensors to another process (multiprocessing queues, pipes, Process args).

CUDA shares device memory between processes through CUDA IPC, so a model on the GPU handed to
`mp.Process` (Hogwild training) or a tensor put on an `mp.Queue` arrives as the same memory. The
emulated device's memory cannot be shared with another process; PyTorch's sharing code would fail
deep inside with "_share_fd_: only available on CPU". Here the send fails with what happened and the
way out instead. Host tensors are shared by PyTorch as before. A batch a DataLoader worker made on
the device (a `collate_fn` calling `.cuda()` in a spawned worker) is sent as a copy and made again on
the device by the loader's process: one-way and read-only, so a copy gives what CUDA IPC gives.
"""

from __future__ import annotations

import torch
from torch.multiprocessing import reductions

from torchport.emulated.state import DEVICE_TYPE, state
from torchport.errors import EmulatedDeviceError

__all__ = ["install"]


def _refuse(what: str):
    target = state.profile.name if state.profile is not None else "the target"
    raise EmulatedDeviceError(
        f"A {what} on the emulated device ({target}) cannot be sent to another process: the emulated device "
        "cannot share its memory across processes (CUDA shares device tensors through CUDA IPC). Send "
        "tensor.cpu() (or the model's state_dict on the CPU) and move it to the device in the receiving process."
    )


def _reduce_tensor(tensor):
    if tensor.device.type == DEVICE_TYPE:
        if torch.utils.data.get_worker_info() is not None or _queue_feeder():
            # A DataLoader worker's batch, or a result put on a multiprocessing Queue (`q.put((rank,
            # outputs))` from spawned workers), goes one way: on CUDA it arrives through IPC, here as a
            # copy made again on the device by the receiving process (the values at the put). A queue
            # pickles in its feeder thread, where a refusal would never reach the application: its
            # `put` returns and the receiver waits forever.
            host = tensor.detach().cpu().contiguous()
            # the bytes themselves, not a host tensor (shared through a file descriptor the receiver
            # can only take while the sender lives: a worker that exits after its put would lose it)
            data = host.reshape(-1).view(torch.uint8).numpy().tobytes() if host.numel() else b""
            return _rebuild_on_device, (data, host.dtype, tuple(host.shape), tensor.requires_grad)
        _refuse("tensor")
    return reductions.reduce_tensor(tensor)


def _queue_feeder() -> bool:
    """Whether this is a multiprocessing Queue's feeder thread, pickling what the application put."""
    import threading

    return threading.current_thread().name == "QueueFeederThread"


def _rebuild_on_device(data: bytes, dtype: torch.dtype, shape: tuple, requires_grad: bool) -> torch.Tensor:
    host = torch.frombuffer(bytearray(data), dtype=torch.uint8).view(dtype).reshape(shape) if data else \
        torch.empty(shape, dtype=dtype)
    return host.to(state.device).requires_grad_(requires_grad)


def _reduce_storage(storage):
    if storage.device.type == DEVICE_TYPE:
        _refuse("storage")
    return reductions.reduce_storage(storage)


def install() -> None:
    """Register the checks in place of PyTorch's reducers (registered when torch.multiprocessing was
    imported, above); they run in the sending process."""
    from multiprocessing.reduction import ForkingPickler

    for cls in torch._tensor_classes:
        ForkingPickler.register(cls, _reduce_tensor)
    ForkingPickler.register(torch.Tensor, _reduce_tensor)
    ForkingPickler.register(torch.nn.parameter.Parameter, _reduce_tensor)
    ForkingPickler.register(torch.UntypedStorage, _reduce_storage)
