"""Process-wide state of the emulated device: the active profile, the recorder, the switches."""

from __future__ import annotations

import threading
from typing import Any

import torch

from torchport.profiles import Profile

__all__ = [
    "DEVICE_TYPE",
    "active_profile",
    "set_recorder",
    "get_recorder",
    "downcast_enabled",
    "set_downcast_enabled",
    "set_strict",
    "is_strict",
]

#: The torch device type of the emulated target (PrivateUse1 renamed; no digits allowed).
DEVICE_TYPE = "emulated"


class State:
    """Process-wide state of the emulated device."""

    def __init__(self) -> None:
        self.registered = False
        #: torch.device("emulated", 0) once the device type is registered
        self.device: torch.device | None = None
        self.profile: Profile | None = None
        self.recorder = None
        #: called as (op name, wide dtype, narrow dtype) the first time each dtype is computed in a
        #: narrower one while no census records it (`torchport run` reports it)
        self.on_first_downcast = None
        #: Called with (op name, its rule) the first time the program runs an op the profile marks
        #: unsupported, outside a census (the run summary names it).
        self.on_first_unsupported = None
        #: Called (no arguments) when the program runs an op the profile marks unsupported outside a
        #: census: True refuses it there (`torchport run --strict`, where the application calls it).
        self.refuse_unsupported = None
        self.unsupported_noted: set[str] = set()
        self.downcasts_noted: set = set()
        self.downcast = True
        self.strict = False
        self.allocated = 0
        self.peak = 0
        self.allocations = 0
        self.frees = 0
        #: allocations refused for lack of device memory (CUDA's `num_ooms`)
        self.ooms = 0
        #: this process was forked from one that had used the device (see storage.Block)
        self.forked_after_use = False
        #: historical totals of bytes allocated and freed (CUDA's `.allocated` / `.freed` metrics)
        self.bytes_allocated = 0
        self.bytes_freed = 0
        self.lock = threading.Lock()
        # dtype -> narrower dtype for values, from the profile
        self.value_downcasts: dict[torch.dtype, torch.dtype] = {}
        self.refused: dict[torch.dtype, str] = {}
        #: op name -> autocast kind, the active profile's lists (torchport.autocast_policy)
        self.autocast_policy: dict[str, str] = {}
        self.op_cache: dict[Any, Any] = {}


state = State()


def active_profile() -> Profile | None:
    """The profile the emulated device follows now, or None before `activate`."""
    return state.profile


def set_recorder(recorder) -> None:
    """Install the census recorder that the fallback reports to (None removes it)."""
    state.recorder = recorder


def get_recorder():
    """The census recorder installed now, or None."""
    return state.recorder


def downcast_enabled() -> bool:
    """Whether narrower-dtype rounding is applied (turned off for the reference run of check)."""
    return state.downcast


def set_downcast_enabled(enabled: bool) -> None:
    """Turn the profile's dtype downcasts on or off (dtype refusals always apply)."""
    state.downcast = bool(enabled)


def set_strict(strict: bool) -> None:
    """In strict mode ops the profile marks unsupported raise instead of running on the host."""
    state.strict = bool(strict)


def is_strict() -> bool:
    """Whether ops the profile marks unsupported raise (strict) or run on the host and are recorded."""
    return state.strict
