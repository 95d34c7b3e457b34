"""`torch.compile` in the application, with the target's compiler.

On a GPU machine `torch.compile(model)` (and `model.compile()`) means inductor generating kernels for
the GPU. Where the target's profile names another compiler (`capabilities.compiler`: `openxla` for
XLA, `neuron` for Trainium), the application's call compiles with it; an emulated device, which has
no code generator, runs the captured graphs through AOTAutograd eagerly (`aot_eager`). Inductor's
`mode=` and `options=` mean nothing to another compiler: they are dropped and the report says so.
A backend the application names other than inductor is its own choice and is kept.
"""

from __future__ import annotations

import torch

from torchport.retarget import state

__all__ = ["compile", "module_compile"]

_real_compile = torch.compile
_Module = torch.nn.Module
_INDUCTOR_ONLY = ("mode", "options")


def _adapt(kwargs: dict) -> dict:
    retarget = state.current()
    asked = kwargs.get("backend", "inductor")
    if retarget is None:
        return kwargs
    retarget.backend.before_compile()
    if asked != "inductor":
        return kwargs
    chosen = retarget.backend.compile_backend()
    if chosen == "inductor":
        return kwargs
    dropped = [f"{name}={kwargs.pop(name)!r}" for name in _INDUCTOR_ONLY if kwargs.get(name) is not None]
    kwargs["backend"] = chosen
    note = f"compiled with backend {chosen!r} (the {retarget.backend.name} target's compiler) instead of inductor"
    if dropped:
        note += f"; inductor's {', '.join(dropped)} dropped"
    # one decision for each distinct request, so every dropped setting is in the report
    retarget.decide(f"torch.compile {', '.join(dropped)}" if dropped else "torch.compile", note, kind="adapted")
    return kwargs


def compile(model=None, **kwargs):
    """`torch.compile` as the application sees it (also as a decorator, with or without arguments)."""
    kwargs = _adapt(kwargs)
    if model is None:
        return _real_compile(**kwargs)
    return _real_compile(model, **kwargs)


def module_compile(site: int, obj, *args, **kwargs):
    """`model.compile(...)` on a torch module: `torch.compile` of its forward, with the same choice."""
    if isinstance(obj, _Module) and not args:
        kwargs = _adapt(kwargs)
    return obj.compile(*args, **kwargs)
