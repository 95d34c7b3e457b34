"""Pinned host memory of the emulated device, as the target's profile says (capabilities.pinned_memory).

A Python backend cannot hand PyTorch a pinned allocator (getPinnedMemoryAllocator is a C++ hook), so
every request for pinned memory fails inside torch once the emulated device is the process's
accelerator. The emulated device answers them itself:

- where the target pins host memory, `Tensor.pin_memory()`, every factory taking ``pin_memory=True``
  (``torch.empty``, ``torch.zeros``, ``torch.tensor``, ..., ``Tensor.new_*``) and
  ``DataLoader(pin_memory=True)`` give ordinary host memory that answers ``is_pinned()`` True (host
  memory of a device emulated on the host is as good as page-locked);
- where it does not, `pin_memory()` and ``pin_memory=True`` factories are refused with the profile's
  reason, and ``DataLoader(pin_memory=True)`` leaves batches unpinned with one warning, as torch's
  DataLoader does on devices without pinned memory.

The factories are found by construction: every public torch function and Tensor method whose ATen
schema takes ``pin_memory`` and returns a new tensor, or whose documented signature names it
(``torch.tensor``, which has no such ATen op).
"""

from __future__ import annotations

import functools
import warnings
import weakref

import torch

from torchport.emulated.errors import not_emulated
from torchport.emulated.state import DEVICE_TYPE, state
from torchport.errors import EmulatedDeviceError

__all__ = ["install", "supported", "refusal", "factory_names", "method_names"]

#: data pointers of host storages pinned for the emulated device (dropped when the tensor is freed)
_pinned: dict[int, object] = {}


def supported() -> bool:
    """Whether the active profile says the target pins host memory."""
    profile = state.profile
    return bool(profile is not None and profile.capabilities.get("pinned_memory"))


def refusal(what: str) -> EmulatedDeviceError:
    """The error for a pinned-memory request on a target whose profile has none."""
    profile = state.profile
    sources = profile.data.get("capabilities", {}).get("sources", {}) if profile is not None else {}
    reason = sources.get("pinned_memory") or "its profile says capabilities.pinned_memory: false"
    return EmulatedDeviceError(
        f"{what}: target {profile.name!r} has no pinned host memory ({reason}). Fix: leave host memory "
        "unpinned there (drop pin_memory=True / .pin_memory(); `torchport run` does this in your code and "
        "reports it)."
    )


def _mark(tensor: torch.Tensor) -> torch.Tensor:
    try:
        pointer = tensor.untyped_storage().data_ptr()
    except RuntimeError:  # a tensor without data (torch.compile traces with fake tensors)
        return tensor
    if pointer:
        _pinned[pointer] = weakref.finalize(tensor, _pinned.pop, pointer, None)
    return tensor


def _is_pinned(tensor, device=None) -> bool:
    return tensor.untyped_storage().data_ptr() in _pinned


def _pin_memory(tensor, device=None):
    # A copy with the same geometry stands for the page-locked one; is_pinned() answers True for it.
    if not supported():
        raise refusal("Tensor.pin_memory()")
    pinned = torch.empty_strided(tensor.size(), tensor.stride(), dtype=tensor.dtype)
    pinned.copy_(tensor)
    return _mark(pinned)


def _pinned_result(result, what: str):
    """`result` of a factory called with pin_memory=False in place of True, marked pinned."""
    if not isinstance(result, torch.Tensor):
        return result
    if result.device.type != "cpu":
        # pin_memory asks for page-locked host memory; a device tensor has none to lock.
        raise EmulatedDeviceError(
            f"{what}: only dense CPU tensors can be pinned, and this one is on {result.device}. "
            "Fix: create it on the host (no device=) with pin_memory=True, then copy it over with "
            ".to(device, non_blocking=True)."
        )
    if result.layout != torch.strided:
        raise not_emulated(what, f"pinned {result.layout} tensors (only dense ones are pinned)")
    return _mark(result)


def _factory(name: str, original):
    what = f"torch.{name}(pin_memory=True)"

    @functools.wraps(original)
    def factory(*args, **kwargs):
        if not kwargs.get("pin_memory"):
            return original(*args, **kwargs)
        if not supported():
            raise refusal(what)
        kwargs["pin_memory"] = False
        return _pinned_result(original(*args, **kwargs), what)

    return factory


def _method(name: str, original):
    what = f"Tensor.{name}(pin_memory=True)"

    @functools.wraps(original)
    def method(self, *args, **kwargs):
        if not kwargs.get("pin_memory"):
            return original(self, *args, **kwargs)
        if not supported():
            raise refusal(what)
        kwargs["pin_memory"] = False
        return _pinned_result(original(self, *args, **kwargs), what)

    # A method descriptor has no module of its own: the wrapper is torch's, as the method it replaces
    # (callers that decide by module, such as retargeting, see a torch method).
    method.__module__ = torch.Tensor.__module__
    return method


def _takes_pin_memory(name: str, callable_) -> bool:
    """Whether a torch function or Tensor method takes pin_memory and returns a new tensor."""
    signature = (getattr(callable_, "__doc__", None) or "").strip().partition("\n")[0]
    if "pin_memory=" in signature:  # torch.tensor: documented, with no ATen op taking it
        return True
    packet = getattr(torch.ops.aten, name, None)
    if not isinstance(packet, torch._ops.OpOverloadPacket):
        return False
    for overload in packet.overloads():
        schema = getattr(packet, overload)._schema
        fresh = all(result.alias_info is None for result in schema.returns)
        if fresh and any(argument.name == "pin_memory" for argument in schema.arguments):
            return True
    return False


@functools.lru_cache(maxsize=1)
def factory_names() -> tuple[str, ...]:
    """Public torch functions taking pin_memory=True (torch.empty, torch.zeros, torch.tensor, ...)."""
    return tuple(
        name for name in dir(torch._C._VariableFunctions)
        if not name.startswith("_") and _takes_pin_memory(name, getattr(torch._C._VariableFunctions, name))
    )


@functools.lru_cache(maxsize=1)
def method_names() -> tuple[str, ...]:
    """Public Tensor methods taking pin_memory=True (new_empty, new_zeros, new_tensor, ...)."""
    return tuple(
        name for name in dir(torch._C.TensorBase)
        if not name.startswith("_") and _takes_pin_memory(name, getattr(torch._C.TensorBase, name))
    )


def _register_for_torchscript(wrapper, original) -> None:
    # TorchScript finds torch functions by identity; the wrapper compiles as the op it wraps.
    from torch.jit import _builtins

    op = _builtins._find_builtin(original)
    if op is not None:
        _builtins._register_builtin(wrapper, op)


def _loader_pin_memory(original):
    @functools.wraps(original)
    def pin_memory(data, device=None):
        if supported():
            return original(data, device)
        if not _loader_pin_memory.warned:
            _loader_pin_memory.warned = True
            warnings.warn(
                f"'pin_memory' argument is set as true but target {state.profile.name!r} has no pinned host "
                "memory, so device pinned memory won't be used.",
                UserWarning,
                stacklevel=2,
            )
        return data

    return pin_memory


_loader_pin_memory.warned = False


def _keep_default_device(originals) -> None:
    """`with torch.device(d):` and `torch.set_default_device(d)` give factories the device by
    recognising torch's factory functions in the calls they see, which are the C functions the
    wrappers call: they stay recognised (else factories under a default device land on the CPU)."""
    if not originals:
        return
    from torch.utils import _device

    known = _device._device_constructors

    @functools.lru_cache(maxsize=1)
    def constructors():
        return set(known()) | set(originals)

    _device._device_constructors = constructors


def install(library) -> bool:
    """Serve pinned memory when the emulated device is the process's accelerator.

    Returns False (and changes nothing) where another accelerator (CUDA, ...) owns pinned memory.
    """
    accelerator = torch.accelerator.current_accelerator() if hasattr(torch, "accelerator") else None
    if accelerator is None or accelerator.type != DEVICE_TYPE:
        return False
    with warnings.catch_warnings():
        # PyTorch warns that the CPU's generic kernels are being overridden: that is the point.
        warnings.simplefilter("ignore")
        library.impl("is_pinned", _is_pinned, "CPU")
        library.impl("_pin_memory", _pin_memory, "CPU")
    wrapped = []
    for name in factory_names():
        original = getattr(torch, name, None)
        if original is getattr(torch._C._VariableFunctions, name):
            wrapper = _factory(name, original)
            setattr(torch, name, wrapper)
            _register_for_torchscript(wrapper, original)
            wrapped.append(original)
    _keep_default_device(wrapped)
    for name in method_names():
        original = getattr(torch.Tensor, name)
        if not hasattr(original, "__wrapped__"):  # installed once per process
            setattr(torch.Tensor, name, _method(name, original))
    from torch.utils.data._utils import pin_memory as loader

    if not hasattr(loader.pin_memory, "__wrapped__"):
        loader.pin_memory = _loader_pin_memory(loader.pin_memory)
    return True
