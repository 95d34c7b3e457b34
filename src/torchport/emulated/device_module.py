"""`torch.emulated`, the PrivateUse1 hooks and guard, and torch.accelerator's calls for the device.

Everything answered here about the target (its name, memory, supported autocast dtypes) is read
from the active profile.
"""

from __future__ import annotations

import contextlib

import torch

from torchport.emulated import storage
from torchport.emulated.state import DEVICE_TYPE, state
from torchport.errors import EmulatedDeviceError
from torchport.profiles import Profile

__all__ = ["DeviceModule", "DEVICE_MODULE", "Hooks", "Guard", "route_accelerator_calls"]


class DeviceProperties:
    """What `get_device_properties` answers for the emulated target."""

    def __init__(self, profile: Profile) -> None:
        self.name = f"{profile.title} (emulated on the CPU)"
        self.total_memory = profile.memory_bytes
        self.type = DEVICE_TYPE

    def __repr__(self) -> str:
        return f"_DeviceProperties(name={self.name!r}, total_memory={self.total_memory})"


def _supports(dtype: torch.dtype) -> bool:
    profile = state.profile
    return profile is None or str(dtype).removeprefix("torch.") not in profile.refused()


class DeviceModule:
    """`torch.emulated`: the device module `torch.get_device_module('emulated')` returns."""

    _device_index = 0

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return True

    def _lazy_init(self) -> None:
        return None

    def _is_in_bad_fork(self) -> bool:
        return False

    def device_count(self) -> int:
        return 1

    def current_device(self) -> int:
        return self._device_index

    def set_device(self, device) -> None:
        index = torch.device(device).index if not isinstance(device, int) else device
        if index not in (None, 0):
            raise EmulatedDeviceError(f"Device index {index!r} does not exist; the emulated target has 1 device: 0.")

    def device(self, device):
        """Context manager selecting a device; the emulated target has one, so it changes nothing."""
        return contextlib.nullcontext()

    # One stream, the default one: the device computes in program order (EMULATOR_LIMITS), so code
    # handed the current stream (torch.distributed.checkpoint's loaders) gets it and waits on nothing.
    def current_stream(self, device=None) -> torch.Stream:
        return torch.Stream(device=state.device)

    default_stream = current_stream

    def Stream(self, device=None, priority: int = 0, **kwargs) -> torch.Stream:  # noqa: N802 - torch.cuda.Stream
        """A new stream (FSDP2 makes its copy streams so): the one stream there is."""
        return torch.Stream(device=state.device)

    def Event(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):  # noqa: N802
        """An event on the device's one stream (torch.cuda.Event's arguments)."""
        return torch.Event(device=state.device, enable_timing=enable_timing, blocking=blocking,
                           interprocess=interprocess)

    def stream(self, stream):
        """Context manager making `stream` current; with one stream, nothing changes."""
        return contextlib.nullcontext()

    def synchronize(self, device=None) -> None:
        recorder = state.recorder
        if recorder is not None:
            recorder.record_sync("synchronize")

    # The emulated device's random draws come from the host generator (its state is what
    # get_rng_state gives), so seeding the device seeds that generator.
    def manual_seed(self, seed: int) -> None:
        torch.default_generator.manual_seed(int(seed))

    def manual_seed_all(self, seed: int) -> None:
        torch.default_generator.manual_seed(int(seed))

    def seed(self) -> None:
        torch.default_generator.seed()

    def seed_all(self) -> None:
        torch.default_generator.seed()

    def initial_seed(self) -> int:
        return torch.initial_seed()

    @property
    def default_generators(self) -> tuple:
        return (torch.default_generator,)

    def get_rng_state(self, device=None):
        return torch.get_rng_state()

    def set_rng_state(self, new_state, device=None) -> None:
        torch.set_rng_state(new_state)

    def get_amp_supported_dtype(self) -> list:
        return [dtype for dtype in (torch.float16, torch.bfloat16) if _supports(dtype)]

    def is_bf16_supported(self, including_emulation: bool = True) -> bool:
        return _supports(torch.bfloat16)

    def get_device_name(self, device=None) -> str:
        return DeviceProperties(state.profile).name

    def get_device_properties(self, device=None) -> DeviceProperties:
        return DeviceProperties(state.profile)

    def get_device_capability(self, device=None) -> tuple[int, int]:
        return (8, 0)

    def mem_get_info(self, device=None) -> tuple[int, int]:
        total = state.profile.memory_bytes
        return total - state.allocated, total

    def empty_cache(self) -> None:
        return None

    memory_allocated = staticmethod(storage.memory_allocated)
    max_memory_allocated = staticmethod(storage.max_memory_allocated)
    reset_peak_memory_stats = staticmethod(storage.reset_peak_memory_stats)
    memory_stats = staticmethod(storage.memory_stats)

    def memory_reserved(self, device=None) -> int:
        return state.allocated

    def max_memory_reserved(self, device=None) -> int:
        return state.peak

    def reset_accumulated_memory_stats(self, device=None) -> None:
        state.allocations = state.allocations - state.frees
        state.frees = 0


DEVICE_MODULE = DeviceModule()


def _is_emulated_accelerator() -> bool:
    accelerator = torch._C._accelerator_getAccelerator() if hasattr(torch._C, "_accelerator_getAccelerator") else None
    return accelerator is not None and accelerator.type == DEVICE_TYPE


def route_accelerator_calls() -> None:
    """Answer torch.accelerator's allocator and synchronize calls for the emulated device.

    Those calls reach C++ registries a Python backend cannot fill; each binding is wrapped so the
    emulated device answers and every other device keeps its original behaviour.
    """
    module = DEVICE_MODULE
    replacements = {
        "_accelerator_synchronizeDevice": lambda index=None: module.synchronize(index),
        "_accelerator_isAllocatorInitialized": lambda: True,
        "_accelerator_getDeviceStats": lambda index=None: storage.memory_stats(index),
        "_accelerator_resetPeakStats": lambda index=None: storage.reset_peak_memory_stats(index),
        "_accelerator_resetAccumulatedStats": lambda index=None: module.reset_accumulated_memory_stats(index),
        "_accelerator_emptyCache": lambda: None,
        "_accelerator_getMemoryInfo": lambda index=None: module.mem_get_info(index),
    }
    for name, replacement in replacements.items():
        original = getattr(torch._C, name, None)
        if original is None:
            continue

        def routed(*args, _original=original, _replacement=replacement):
            if _is_emulated_accelerator():
                return _replacement(*args)
            return _original(*args)

        routed.__name__ = name
        setattr(torch._C, name, routed)


class Hooks(torch._C._acc.PrivateUse1Hooks):
    def is_available(self) -> bool:
        return True

    def has_primary_context(self, device_index) -> bool:
        return True

    def is_built(self) -> bool:
        return True


class Guard(torch._C._acc.DeviceGuard):
    def type_(self):
        return torch._C._autograd.DeviceType.PrivateUse1
