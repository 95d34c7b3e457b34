"""The backend registry: every device torchport knows, the ONE priority order, and `resolve`.

A third party adds a device with a `torchport.backends` entry point naming a module that defines
a `Backend` subclass decorated with `register`.
"""

from __future__ import annotations

import importlib
import pkgutil
from importlib import metadata

from torchport.backends.base import Backend, Probe
from torchport.errors import DeviceUnavailableError, UnknownDeviceError

__all__ = [
    "Backend",
    "Probe",
    "PRIORITY",
    "register",
    "get",
    "names",
    "all_backends",
    "resolve",
    "canonical_name",
    "real_backends",
    "targets",
    "default_target",
    "emulated_name",
    "broken_plugins",
    "EMULATED_SUFFIX",
]

#: The suffix every emulated twin's name carries ('neuron-emulated').
EMULATED_SUFFIX = "-emulated"

#: The order `auto` tries backends in. The one place this order is written down.
PRIORITY: tuple[str, ...] = ("cuda", "neuron", "xla", "xpu", "npu", "mps", "cpu")

#: Modules of this package that are not devices; every other module here is one backend.
_NOT_DEVICES = ("base", "emulated")
_registry: dict[str, Backend] = {}
_aliases: dict[str, str] = {}
_loaded = False


def register(cls: type[Backend]) -> type[Backend]:
    """Class decorator: add a backend (and its aliases) to the registry."""
    instance = cls()
    _registry[instance.name] = instance
    for alias in instance.aliases:
        _aliases[alias] = instance.name
    return cls


def _load() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    builtin = sorted(info.name for info in pkgutil.iter_modules(__path__) if info.name not in _NOT_DEVICES)
    for module in builtin:
        try:
            importlib.import_module(f"torchport.backends.{module}")
        except ModuleNotFoundError as error:
            if error.name != f"torchport.backends.{module}":
                raise
    try:
        entry_points = metadata.entry_points(group="torchport.backends")
    except Exception:  # pragma: no cover - broken metadata must not break torchport
        entry_points = ()
    for entry_point in entry_points:
        try:
            entry_point.load()
        except Exception as error:  # a broken plugin is reported by doctor, not fatal here
            _broken_plugins[entry_point.name] = f"{entry_point.value}: {type(error).__name__}: {error}"
    from torchport.backends import emulated

    emulated.register_twins(list(_registry.values()))


_broken_plugins: dict[str, str] = {}


def broken_plugins() -> dict[str, str]:
    """{entry point name: 'module:attr: why it failed to load'} for third-party backends that broke."""
    _load()
    return dict(_broken_plugins)


def real_backends() -> list[Backend]:
    """Registered backends that are devices (no '-emulated' twins), in the order `auto` tries them."""
    return [backend for backend in all_backends() if not backend.name.endswith(EMULATED_SUFFIX)]


def targets() -> tuple[str, ...]:
    """The targets code written for cuda can be ported to and judged for: every real backend but
    cuda, the source every rule and facade speaks of (the host cpu last)."""
    return tuple(backend.name for backend in real_backends() if backend.name != "cuda")


def default_target() -> str:
    """The target `check` rehearses when none is named: the first accelerator in PRIORITY after cuda."""
    return targets()[0]


def emulated_name(name: str) -> str:
    """'<name>-emulated': the twin of a real backend."""
    return f"{canonical_name(name).removesuffix(EMULATED_SUFFIX)}{EMULATED_SUFFIX}"


def all_backends() -> list[Backend]:
    """Every registered backend in the order `auto` tries them: PRIORITY's accelerators, then
    other registered backends by name (third-party devices, emulators), then the host CPU."""
    _load()
    host = PRIORITY[-1]
    ordered = [_registry[name] for name in PRIORITY[:-1] if name in _registry]
    ordered += [backend for name, backend in sorted(_registry.items()) if name not in PRIORITY]
    return ordered + [_registry[host]]


def names() -> list[str]:
    """Every name `resolve` accepts: backends, aliases and 'auto'."""
    _load()
    return ["auto", *[backend.name for backend in all_backends()], *sorted(_aliases)]


def canonical_name(name: str) -> str:
    """The registry name for `name` or one of its aliases; raises UnknownDeviceError."""
    _load()
    key = name.strip().lower()
    if key in _registry:
        return key
    if key in _aliases:
        return _aliases[key]
    raise UnknownDeviceError(name, names())


def get(name: str) -> Backend:
    """The backend called `name` (or an alias of it), usable or not."""
    return _registry[canonical_name(name)]


def auto() -> tuple[Backend, dict[str, str]]:
    """The first usable backend in PRIORITY, with the reason each earlier one was skipped."""
    skipped: dict[str, str] = {}
    for backend in all_backends():
        if not backend.auto_selectable:
            continue
        probe = backend.probe()
        if probe.usable:
            return backend, skipped
        skipped[backend.name] = probe.reason
    raise AssertionError("the cpu backend is always usable")  # pragma: no cover


def resolve(name: str = "auto") -> Backend:
    """A usable backend for `name`; raises with the reason and the next step when there is none."""
    if name.strip().lower() == "auto":
        return auto()[0]
    backend = get(name)
    probe = backend.probe()
    if not probe.usable:
        usable = [other.name for other in all_backends() if other.probe().usable]
        raise DeviceUnavailableError(backend.name, probe.reason, probe.how_to_enable, usable)
    return backend
