"""Registering the emulated device type with PyTorch, and switching the profile it follows."""

from __future__ import annotations

import sys

import torch

from torchport.autocast_policy import policy
from torchport.emulated.state import DEVICE_TYPE, state
from torchport.errors import EmulatedDeviceError
from torchport.profiles import Profile, load

__all__ = ["register", "is_registered", "activate"]

_libraries: list = []


def is_registered() -> bool:
    """Whether this process has registered the emulated device type."""
    return state.registered


def register() -> None:
    """Register the ``emulated`` device type with PyTorch (once per process; later calls do nothing)."""
    with state.lock:
        if state.registered:
            return
        current = torch._C._get_privateuse1_backend_name()
        if current not in ("privateuseone", DEVICE_TYPE):
            raise EmulatedDeviceError(
                f"PrivateUse1 is already registered as {current!r} in this process, so the emulated device "
                f"cannot be registered. Run the emulated target in a process without the {current!r} backend."
            )
        from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

        from torchport.emulated import (autocast, device_module, dispatch, distributed, kernels, nested, serialization,
                                        sharing, storage)

        _setup_privateuseone_for_python_backend(
            DEVICE_TYPE, device_module.DEVICE_MODULE, device_module.Hooks(), device_module.Guard()
        )
        state.device = torch.device(DEVICE_TYPE, 0)
        dispatch.install_special_ops()
        library = torch.library.Library("_", "IMPL")
        library.fallback(dispatch.fallback, "PrivateUse1")
        _libraries.append(library)
        dispatch.install_layout_fallbacks(_libraries)
        nested.install(_libraries)
        device_module.route_accelerator_calls()
        kernels.install()
        autocast.install()
        serialization.install()
        sharing.install()
        distributed.install()
        storage.install_storage_constructor()
        storage.install_storage_resize()
        state.registered = True


def hide_from_dynamo() -> None:
    """Dynamo traces the device's own Python (its device guard, allocator and kernels, run while
    a graph is traced) as the program's code, and falls back to eager for the whole function where it
    cannot; the device is part of the machine, not of the program: Dynamo skips it. Except the
    wrappers of torch's factories that answer pin_memory=True (pinned.py): the program calls them as
    torch's own `torch.ones` / `torch.zeros`, and Dynamo reads through them to torch's function (a
    skipped one broke the graph at every factory a compiled function called)."""
    if _hidden_from_dynamo:
        return
    import pkgutil

    import torch._dynamo.trace_rules

    package = __name__.rpartition(".")[0]
    for module in pkgutil.iter_modules(sys.modules[package].__path__):
        if module.name not in _TRACED_BY_DYNAMO:
            torch._dynamo.trace_rules.add(f"{package}.{module.name}")
    _hidden_from_dynamo.append(True)


#: modules of the device that Dynamo traces: what the program calls as torch's own functions
_TRACED_BY_DYNAMO = frozenset({"pinned"})


_hidden_from_dynamo: list[bool] = []


def activate(profile: Profile | str) -> Profile:
    """Make `profile` the target the emulated device behaves like, registering the device if needed.

    Every target fact the device acts on (dtype downcasts and refusals, op rules, memory, name) is
    read from this profile object.
    """
    if isinstance(profile, str):
        profile = load(profile)
    register()
    value_downcasts: dict[torch.dtype, torch.dtype] = {}
    for name, narrow in profile.downcasts().items():
        value_downcasts[getattr(torch, name)] = getattr(torch, narrow)
    refused: dict[torch.dtype, str] = {}
    for name in profile.refused():
        rule = profile.dtype_rule(name)
        refused[getattr(torch, name)] = rule.message or (
            f"dtype torch.{name} is not supported on target {profile.name!r} ({rule.note or rule.source})."
            " Use torch.float32 (or another supported dtype) instead"
        )
    state.profile = profile
    state.autocast_policy = policy(profile)
    state.value_downcasts = value_downcasts
    state.refused = refused
    state.op_cache.clear()
    return profile
