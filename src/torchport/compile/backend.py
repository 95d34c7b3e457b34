"""The `torchport` backend for torch.compile: placement, host fallback, then the target's own compiler.

    torch.compile(model, backend="torchport")                                   # registered entry point
    torch.compile(model, backend="torchport", options={"target": "neuron", "strict": True})

It does not pad shapes (Dynamo hands it one graph at one shape); `torchport.compile(model)` adds
shape bucketing on top of it.
"""

from __future__ import annotations

import time

import torch

from torchport.compile.placement import partitioned, place_nodes, shape_signature
from torchport.compile.report import CompileReport
from torchport.errors import TorchportError, UsageError

__all__ = ["TorchportBackend", "torchport_backend", "resolve_target", "CompileFallbackError", "FALLBACK_MODES"]

#: What happens to ops the target lacks: run on the host, or fail.
FALLBACK_MODES = ("host", "error")
_OPTIONS = ("target", "fallback", "strict", "profile")


class CompileFallbackError(TorchportError):
    """strict=True (or fallback='error') and a graph holds ops the target's profile lacks."""


def resolve_target(target=None):
    """The Backend to compile for: `target` (name, alias or Backend), else the retargeted device, else auto."""
    from torchport import backends
    from torchport.retarget import state

    if isinstance(target, backends.Backend):
        return target
    if target is None:
        current = state.current()
        if current is not None:
            return current.backend
        target = "auto"
    return backends.resolve(target)


def _load_profile(profile):
    from torchport.profiles import Profile, load

    return profile if isinstance(profile, Profile) else load(profile)


def _profile_of(backend):
    try:
        return backend.profile()
    except TorchportError:
        return None


class TorchportBackend:
    """A Dynamo backend bound to one target; each instance keeps its own CompileReport."""

    def __init__(self, target=None, fallback: str = "host", strict: bool = False,
                 report: CompileReport | None = None, profile=None) -> None:
        if fallback not in FALLBACK_MODES:
            raise UsageError(
                f"Unknown fallback {fallback!r}. Allowed: {', '.join(FALLBACK_MODES)}. "
                "Use fallback='host' to run ops the target lacks on the CPU, or strict=True to fail."
            )
        self.backend = resolve_target(target)
        self.backend.before_compile()
        # `profile` rehearses another target's op support on this device (e.g. neuron's on the CPU).
        self.profile = _load_profile(profile) if profile is not None else _profile_of(self.backend)
        self.compiler = self.backend.compiler  # the profile's capabilities.compiler
        self.strict = strict or fallback == "error"
        self.report = report or CompileReport(target=self.backend.name, compiler=self.compiler)
        self.__name__ = "torchport"

    def compiler_fn(self):
        from torch._dynamo import lookup_backend

        try:
            return lookup_backend(self.compiler)
        except Exception as error:
            package = self.backend.profile().data.get("package")
            install = f"Install {package!r}" if package else "Install the package that provides it"
            raise UsageError(
                f"The {self.backend.name!r} target compiles with torch.compile backend {self.compiler!r}, "
                f"which is not available here: {error}. {install}, or compile for another target."
            ) from error

    def __call__(self, graph_module: torch.fx.GraphModule, example_inputs):
        compiler_fn = self.compiler_fn()
        placement = place_nodes(graph_module, self.profile, self.report)
        host = self.report.host_ops()
        host_nodes = [node for node, where in placement.items() if where == "host"]
        if host_nodes and self.strict:
            names = ", ".join(f"{entry.op} ({entry.reason})" for entry in host)
            label = repr(self.backend.name)
            if self.profile is not None and self.profile.name != self.backend.name:
                label += f" with the {self.profile.name!r} profile"
            raise CompileFallbackError(
                f"strict compile for {label}: the graph holds ops the target lacks: {names}. "
                "Rewrite them (see each op's fix in the profile, or torchport check), or pass "
                "strict=False to run them on the host."
            )
        if not host_nodes:
            started = time.perf_counter()
            compiled = compiler_fn(graph_module, example_inputs)
            self.report.compiled(shape_signature(example_inputs), time.perf_counter() - started)
            return compiled
        # Partitions compile at their first call, with real inputs (shapes after a
        # data-dependent op are known only then).
        return partitioned(graph_module, placement, compiler_fn, self.report)


def torchport_backend(graph_module, example_inputs, options: dict | None = None):
    """The entry point behind torch.compile(backend='torchport'); options: target, fallback, strict.

    Reports of these compilations accumulate in `torchport.compile.backend_report()`.
    """
    options = dict(options or {})
    unknown = sorted(set(options) - set(_OPTIONS))
    if unknown:
        raise UsageError(
            f"Unknown torchport compile option(s) {unknown}. Allowed: {', '.join(_OPTIONS)}. "
            "Example: torch.compile(model, backend='torchport', options={'target': 'neuron'})."
        )
    backend = TorchportBackend(options.get("target"), options.get("fallback", "host"), options.get("strict", False),
                               report=_shared_report(options.get("target")), profile=options.get("profile"))
    return backend(graph_module, example_inputs)


_REPORTS: dict = {}


def _shared_report(target) -> CompileReport:
    backend = resolve_target(target)
    report = _REPORTS.get(backend.name)
    if report is None:
        compiler = backend.compiler
        report = _REPORTS[backend.name] = CompileReport(target=backend.name, compiler=compiler)
    return report


def backend_report(target=None) -> CompileReport:
    """The report of every graph torch.compile(backend='torchport') compiled for `target` in this process."""
    return _shared_report(target)
