"""`torchport.compile(model, ...)`: compile for the target with shape bucketing, host fallback and a report.

    import torchport
    fast = torchport.compile(model)                  # the current target (torchport run's, else auto)
    fast = torchport.compile(model, buckets={1: [64, 128, 256, 512]}, strict=True)
    logits = fast(input_ids)                         # same values as model(input_ids)
    print(fast.report.text())                        # compilations, bucket hits, where each op ran
"""

from __future__ import annotations

import contextlib
import time

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from torchport.compile.backend import CompileFallbackError, TorchportBackend, _profile_of
from torchport.compile.bucketing import Bucketer, parse_buckets
from torchport.errors import UsageError

__all__ = ["compile", "CompiledModule", "Runner", "attach", "detach", "PRECISIONS"]

#: `precision=`: None follows `torchport run --precision` (which already acts on the program's
#: autocast regions); the others wrap every compiled call in the policy's autocast.
PRECISIONS = (None, "keep", "auto", "bf16", "fp32")
#: Recompilations a static-shape compile may need before Dynamo would give up and run eagerly.
_RECOMPILE_LIMIT = 256


def _autocast(policy: str | None, backend):
    """The autocast context a precision policy puts around compiled calls (None: none)."""
    if policy in (None, "keep"):
        return None
    device_type = backend.device_type
    if policy == "fp32":
        return lambda: torch.autocast(device_type, enabled=False)
    if policy == "bf16":
        dtype = torch.bfloat16
    else:  # auto: the target's preferred reduced precision, none where that is fp32
        dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(backend.preferred_precision)
        if dtype is None:
            return None
    return lambda: torch.autocast(device_type, dtype=dtype)


class Runner:
    """The call logic shared by CompiledModule and `attach`: observe, probe, pad, call, slice, report."""

    def __init__(self, module: torch.nn.Module, function, backend: TorchportBackend, bucketer: Bucketer | None,
                 precision: str | None) -> None:
        self.module = module
        self.function = function  # the eager forward (never the compiled or attached one)
        self.backend = backend
        self.report = backend.report
        self.bucketer = bucketer
        self.autocast = _autocast(precision, backend.backend)
        self.report.precision = precision or "as the program's autocast regions ask (torchport run policy)"
        self.compiled = torch.compile(function, backend=backend, dynamic=False)
        self.eager_reason: str | None = None
        self.seen: set = set()

    def _context(self):
        return self.autocast() if self.autocast is not None else contextlib.nullcontext()

    def _key(self, leaves) -> tuple:
        """What decides whether Dynamo may compile on this call (shapes, grad mode, train mode)."""
        return (tuple(leaf.shape if isinstance(leaf, torch.Tensor) else None for leaf in leaves),
                torch.is_grad_enabled(), self.module.training, torch.is_autocast_enabled())

    def _call_compiled(self, leaves, spec):
        args, kwargs = _unflatten(leaves, spec)
        key = self._key(leaves)
        if key in self.seen:
            # A call Dynamo has compiled for: no compile can happen, so no config to set (the
            # patch costs tens of microseconds per call).
            if self.autocast is None:
                return self.compiled(*args, **kwargs)
            with self.autocast():
                return self.compiled(*args, **kwargs)
        config = torch._dynamo.config
        compilations, seconds, started = self.report.compilations, self.report.compile_seconds, time.perf_counter()
        with contextlib.ExitStack() as stack:
            stack.enter_context(config.patch(capture_dynamic_output_shape_ops=True,
                                             recompile_limit=max(config.recompile_limit, _RECOMPILE_LIMIT)))
            stack.enter_context(self._context())
            result = self.compiled(*args, **kwargs)
        if self.report.compilations > compilations:
            # Compile time as the program feels it: Dynamo's tracing, the compiler, the first run.
            self.report.compile_seconds = seconds + time.perf_counter() - started
        self.seen.add(key)
        return result

    def _call_plain(self, leaves, spec):
        args, kwargs = _unflatten(leaves, spec)
        with self._context():
            return self.function(*args, **kwargs)

    def _call_eager(self, leaves, spec, reason: str):
        self.report.eager_calls += 1
        self.report.ran_eagerly(reason)
        return self._call_plain(leaves, spec)

    def __call__(self, *args, **kwargs):
        self.report.calls += 1
        leaves, spec = _flatten(args, kwargs)
        if self.eager_reason:
            return self._call_eager(leaves, spec, self.eager_reason)
        bucketer = self.bucketer
        if bucketer is None:
            return self._guarded(leaves, spec)
        if bucketer.observe(leaves):
            return self._call_eager(leaves, spec, "first call: shapes observed before choosing buckets (buckets='auto')")
        for dimension, group in bucketer.groups.items():
            if not group.probed and group.padded:
                bucketer.probe(self.module, lambda probe_leaves: self._call_plain(probe_leaves, spec), leaves, dimension)
                self.report.bucketing[f"{dimension}"] = group.decision()
        plan = bucketer.plan(leaves)
        padding = {dimension: bucket for dimension, (real, bucket) in plan.items() if bucket != real}
        before = self.report.compilations
        if not padding:
            result = self._guarded(leaves, spec)
        else:
            self.report.padded_calls += 1
            result = self._guarded(bucketer.pad(leaves, padding), spec)
        if self.report.compilations == before and not self.eager_reason:
            self.report.bucket_hits += 1
        if not padding:
            return result
        output_leaves, output_spec = tree_flatten(result)
        return tree_unflatten(bucketer.slice(output_leaves, plan), output_spec)

    def _guarded(self, leaves, spec):
        """The compiled call; a compile failure runs the model eagerly from then on and says why."""
        try:
            return self._call_compiled(leaves, spec)
        except Exception as error:
            strict_failure = _find(error, CompileFallbackError)
            if strict_failure is not None:
                raise strict_failure from None
            if not isinstance(error, torch._dynamo.exc.TorchDynamoException) or self.backend.strict:
                raise
            self.eager_reason = f"compilation failed ({type(error).__name__}: {str(error).splitlines()[0][:200]})"
            self.report.failure = self.eager_reason
            return self._call_eager(leaves, spec, self.eager_reason)


class CompiledModule(torch.nn.Module):
    """A module compiled for a target: call it like the original; `report` says what happened.

    Parameters are the original module's (shared, not copied); state_dict and load_state_dict use the
    original's keys, so checkpoints stay loadable without torchport; other attributes (a model's own
    methods) are the original's.
    """

    def __init__(self, module: torch.nn.Module, runner: Runner) -> None:
        super().__init__()
        self.module = module
        object.__setattr__(self, "runner", runner)
        self.report = runner.report

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["module"], name)

    def state_dict(self, *args, **kwargs):
        return self.module.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        return self.module.load_state_dict(state_dict, strict=strict, assign=assign)

    def forward(self, *args, **kwargs):
        return self.runner(*args, **kwargs)


def _flatten(args: tuple, kwargs: dict):
    """(leaves, spec); positional tensors only (the common case) skip pytree, spec None."""
    if not kwargs and all(type(value) is torch.Tensor for value in args):
        return args, None
    return tree_flatten((args, kwargs))


def _unflatten(leaves, spec):
    if spec is None:
        return tuple(leaves), {}
    return tree_unflatten(list(leaves), spec)


def _find(error: BaseException, kind):
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, kind):
            return error
        seen.add(id(error))
        error = getattr(error, "inner_exception", None) or error.__cause__
    return None


def compile(model: torch.nn.Module, target=None, buckets="auto", fallback: str = "host", strict: bool = False,
            precision: str | None = None, profile=None, compiler: str | None = None,
            pad_value=0) -> CompiledModule:  # noqa: A001 - torchport.compile mirrors torch.compile
    """Compile `model` for `target` with its own compiler, padding varying shapes to a few buckets.

    target     backend name or alias ('cpu', 'xla', 'neuron', ...); None: torchport run's target, else auto.
    buckets    'auto' (dimensions that vary between calls pad to the next power of two; the first
               call runs eagerly to observe shapes), {dimension: [sizes]}, or None (no padding).
               A dimension is padded only after a probe shows padding does not change results.
    fallback   'host': ops the target's profile lacks run on the CPU; 'error': fail (as strict=True).
    strict     fail naming the ops the target lacks instead of running them on the host.
    precision  None (follow torchport run), 'keep', 'auto' (the target's preferred reduced precision),
               'bf16' or 'fp32', applied around every compiled call.
    profile    another target's profile for placement (rehearse neuron's op support on the CPU).
    compiler   override the target's torch.compile backend (e.g. 'eager' to count graphs cheaply).
    """
    if not isinstance(model, torch.nn.Module):
        raise UsageError(
            f"torchport.compile takes a torch.nn.Module, got {type(model).__name__}. "
            "Wrap a function in a Module, or use torch.compile(fn, backend='torchport')."
        )
    if precision not in PRECISIONS:
        raise UsageError(f"Unknown precision {precision!r}. Allowed: {', '.join(map(str, PRECISIONS))}.")
    runner = _runner(model, model.forward, target, buckets, fallback, strict, precision, profile, compiler, pad_value)
    return CompiledModule(model, runner)


def _runner(model, function, target, buckets, fallback, strict, precision, profile, compiler, pad_value) -> Runner:
    backend = TorchportBackend(target, fallback=fallback, strict=strict, profile=profile)
    if compiler is not None:
        backend.compiler = backend.report.compiler = compiler
    spec = parse_buckets(buckets)
    target_profile = _profile_of(backend.backend)  # the device's own, not a rehearsed one
    host_pad = bool(target_profile is not None and target_profile.static_shapes)
    bucketer = Bucketer(spec, pad_value, host_pad) if spec is not None else None
    if bucketer is None:
        backend.report.note("buckets=None: every new input shape compiles a new graph")
    return Runner(model, function, backend, bucketer, precision)


def attach(module: torch.nn.Module, **options) -> Runner:
    """Compile `module` in place: its `forward` becomes the compiled one (same object, same state_dict,
    hooks and methods); returns the Runner, whose `report` says what happened. Options as `compile`.
    Used by `torchport run --compile`. A module attached this way cannot be deep-copied or pickled
    whole (its state_dict can); `detach(module)` restores the original forward."""
    existing = module.__dict__.get("forward")
    if isinstance(existing, Runner):
        return existing
    function = type(module).forward.__get__(module)
    runner = _runner(module, function, options.get("target"), options.get("buckets", "auto"),
                     options.get("fallback", "host"), options.get("strict", False), options.get("precision"),
                     options.get("profile"), options.get("compiler"), options.get("pad_value", 0))
    module.forward = runner
    return runner


def detach(module: torch.nn.Module) -> None:
    """Undo `attach`: the module's class forward runs again."""
    if isinstance(module.__dict__.get("forward"), Runner):
        del module.__dict__["forward"]
