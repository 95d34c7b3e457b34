"""Where a call made by the application goes: to torch (or a library built on it), or elsewhere.

A device value is mapped to the target only where it leaves the application for torch, or for an
installed distribution that depends on torch (a requirement on `torch`, extras included, read with
importlib.metadata): `torch.ones(2, device=0)`, `model.to(rank)`, `pipeline(device=0)`. A call to
the application's own code, the standard library, or a distribution that does not depend on torch
keeps the value as written, so `train(device=local_rank)` receives the integer and
`f"cuda:{device}"` inside it works as on a GPU machine.

The decision is made once per module name and cached. For a library that takes device names but
not every device type (safetensors), the decision is the adapter that completes the call
(`loaders`): truthy like True, so the mapping happens, and the call goes through it.
"""

from __future__ import annotations

import builtins
import functools
import importlib.metadata
import re
import sys

import torch

from torchport.retarget import state
from torchport.retarget.traced import constant_in_compiled_code

__all__ = ["leaves_application", "module_of", "depends_on_torch", "forget"]

#: module name -> True (or the library's adapter) when a call into it leaves the application for torch.
_DECIDED: dict[str | None, object] = {}
_REQUIREMENT_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
#: Never mapped: torchport's own API takes real device names (`torchport.use(device="cuda")`).
_NEVER = {"torchport", "builtins"}


def module_of(function) -> str | None:
    """The module a callable belongs to: its own, or for a builtin method its receiver's type's."""
    module = getattr(function, "__module__", None)
    if module is None:
        owner = getattr(function, "__self__", None)
        if owner is not None:
            module = type(owner).__module__
        elif isinstance(function, functools.partial):
            return module_of(function.func)
    elif module == "builtins" and getattr(builtins, getattr(function, "__name__", ""), None) is not function:
        return _exporter(function)
    return module


#: callable -> the module exporting it, for extension types that call themselves builtins
_EXPORTERS: dict = {}


def _exporter(function) -> str:
    """The module that exports an extension type or function whose `__module__` says "builtins"
    (safetensors' `safe_open`, a Rust class): the shortest-named module of an installed
    distribution holding it (not the application's modules that import it), else builtins."""
    try:
        return _EXPORTERS[function]
    except (KeyError, TypeError):
        pass
    names = [name for name, module in list(sys.modules.items())
             if module is not None and name.partition(".")[0] in _distributions()
             and getattr(module, "__dict__", {}).get(getattr(function, "__name__", None)) is function]
    exporter = min(names, key=len) if names else "builtins"
    try:
        _EXPORTERS[function] = exporter
    except TypeError:
        pass
    return exporter


def leaves_application(function):
    """True when calling `function` hands values to torch or to a library built on torch (the
    library's adapter where it has one: `_ADAPTERS`), else False."""
    module = module_of(function)
    try:
        return _DECIDED[module]
    except KeyError:
        if torch.compiler.is_compiling():  # what the compiler guards on stays as it read it
            return _decided_at_trace_time(module)
        decided = _DECIDED[module] = _decide(module)
        return decided


@constant_in_compiled_code
def _decided_at_trace_time(module: str | None):
    """The decision for a module first met in code torch.compile traces: made at trace time and held
    as a constant (the metadata it reads is not the program's code)."""
    return _decide(module)


def forget() -> None:
    """Forget every decision (the scope changed)."""
    _DECIDED.clear()


def _decide(module: str | None):
    if not module:
        return False
    top = module.partition(".")[0]
    if top == "torch":
        return True
    if top in _NEVER or top in sys.stdlib_module_names:
        return False
    loaded = sys.modules.get(module)
    filename = getattr(loaded, "__file__", None)
    retarget = state.current()
    if filename and retarget is not None and retarget.in_scope(filename):
        return False  # the application's own code, whatever distribution it also belongs to
    if not any(depends_on_torch(distribution) for distribution in _distributions().get(top, ())):
        return False
    if top in _ADAPTERS:
        from torchport.retarget import loaders

        return getattr(loaders, _ADAPTERS[top])
    return True


#: top-level package -> its adapter in `loaders`: libraries that take only some device types.
_ADAPTERS = {"safetensors": "safetensors_call"}


@functools.lru_cache(maxsize=1)
def _distributions() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


@functools.lru_cache(maxsize=None)
def depends_on_torch(distribution: str) -> bool:
    """True when `distribution` requires torch (extras included: transformers asks for it as one)."""
    if distribution.lower() == "torch":
        return True
    try:
        requirements = importlib.metadata.requires(distribution) or []
    except importlib.metadata.PackageNotFoundError:
        return False
    for requirement in requirements:
        match = _REQUIREMENT_NAME.match(requirement)
        if match and match.group(1).lower() == "torch":
            return True
    return False
