"""`torchport.compare(...)`: parity, training, performance and cost of one model on two devices."""

from __future__ import annotations

import copy
import inspect
import platform
from typing import Any, Callable, Mapping, Sequence

from torchport.compare.cost import PriceTable, Unit, compute_cost, load_prices
from torchport.compare.devices import DeviceSpec, SideEffects, parse_device, track_effects
from torchport.compare.metrics import merge_thresholds
from torchport.compare.parity import run_parity, seeded
from torchport.compare.performance import measure_side
from torchport.compare.progress import progress_reporter
from torchport.compare.result import CompareResult, PerformanceCheck
from torchport.compare.training import TrainingTolerance, run_training
from torchport.errors import UsageError

__all__ = ["compare", "inputs_sizer", "same_computation"]


def _accepts_argument(function: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD, parameter.VAR_POSITIONAL)
               for parameter in parameters)


def _tile(value: Any, batch_size: int) -> Any:
    from torchport.compare.tree import map_tensors

    def tiled(tensor):
        if tensor.dim() == 0 or tensor.shape[0] == batch_size:
            return tensor
        repeats = -(-batch_size // tensor.shape[0])
        return tensor.repeat(repeats, *([1] * (tensor.dim() - 1)))[:batch_size]

    return map_tensors(tiled, value)


def inputs_sizer(inputs_factory: Any, seed: int) -> tuple[Callable[[int | None], Any], bool]:
    """A function batch_size -> host inputs, and whether the factory makes inputs of any batch size.

    `inputs_factory` is a callable taking a batch size, a callable taking nothing (a fixed sample,
    tiled along dimension 0 for other batch sizes), or the sample itself.
    """
    if callable(inputs_factory) and _accepts_argument(inputs_factory):
        def sized(batch_size: int | None) -> Any:
            return seeded(seed, inputs_factory, batch_size or 1)
        return sized, True
    sample = seeded(seed, inputs_factory) if callable(inputs_factory) else inputs_factory

    def tiled(batch_size: int | None) -> Any:
        return sample if batch_size is None else _tile(sample, batch_size)
    return tiled, False


def _build_model(model_factory: Any, seed: int):
    import torch

    model = model_factory if isinstance(model_factory, torch.nn.Module) else seeded(seed, model_factory)
    if not isinstance(model, torch.nn.Module):
        raise UsageError(
            f"The model factory returned {type(model).__name__}, not a torch.nn.Module. "
            "Return the model (for the CLI: return (model, inputs) or a dict with 'model' and 'inputs')."
        )
    return copy.deepcopy(model).cpu() if model is model_factory else model.cpu()


def _unit(unit: Unit | str | None, units_per_sample: float | None) -> Unit:
    if isinstance(unit, Unit):
        return unit
    return Unit(unit or "samples", float(units_per_sample if units_per_sample is not None else 1.0))


def _performance_checks(result: CompareResult, min_throughput_ratio: float | None,
                        max_memory_ratio: float | None) -> list[PerformanceCheck]:
    checks = []
    reference, target = result.performance.get("reference"), result.performance.get("target")
    if reference is None or target is None:
        return checks
    reference_best, target_best = reference.best(), target.best()
    if min_throughput_ratio is not None and reference_best and target_best:
        ratio = target_best.units_per_second / reference_best.units_per_second if reference_best.units_per_second else None
        passed = ratio is not None and ratio >= min_throughput_ratio
        checks.append(PerformanceCheck("throughput_ratio", ratio, min_throughput_ratio, passed,
                                       f"target/reference throughput {ratio:.2f} (at least {min_throughput_ratio} required)"
                                       if ratio is not None else "reference throughput is zero"))
    if max_memory_ratio is not None:
        worst_ratio = 0.0
        unmeasured = []
        for reference_batch in reference.batches:
            target_batch = target.at(reference_batch.batch_size)
            for batch in (reference_batch, target_batch):
                if batch is not None and batch.peak_memory_bytes is None:
                    unmeasured.append(f"batch {batch.batch_size}: {batch.memory_note}")
            if target_batch and target_batch.peak_memory_bytes is not None and reference_batch.peak_memory_bytes:
                worst_ratio = max(worst_ratio, target_batch.peak_memory_bytes / reference_batch.peak_memory_bytes)
        if unmeasured:
            # A gate on a number that was not measured is not passed.
            checks.append(PerformanceCheck("memory_ratio", None, max_memory_ratio, False,
                                           f"peak memory not measured, so the memory ratio was not checked "
                                           f"({'; '.join(unmeasured[:2])})"))
            return checks
        checks.append(PerformanceCheck("memory_ratio", worst_ratio, max_memory_ratio, worst_ratio <= max_memory_ratio,
                                       f"target/reference peak memory {worst_ratio:.2f} (at most {max_memory_ratio} allowed)"))
    return checks


def same_computation(reference: DeviceSpec, target: DeviceSpec, effects: Mapping[str, SideEffects]) -> bool:
    """True when both sides ran the same computation: one backend, and neither side's policy changed
    anything (no tensor downcast, no autocast), whatever the labels say. `cpu` against `cpu:no-fp64`
    on a model without float64 tensors is the same computation twice."""
    if reference.backend_name != target.backend_name:
        return False
    for name, spec in (("reference", reference), ("target", target)):
        # An autocast policy changes the computation whenever the model runs; count it even where
        # nothing ran (parity, training and performance all off).
        if spec.autocast_dtype is not None or effects.get(name, SideEffects()).changed:
            return False
    return True


def compare(
    model_factory: Any,
    inputs_factory: Any = None,
    reference: str | DeviceSpec = "cpu",
    target: str | DeviceSpec = "auto",
    *,
    precision: str | None = None,
    reference_precision: str | None = None,
    seed: int = 0,
    parity: bool = True,
    per_op: bool = False,
    thresholds: Mapping[str, Mapping[str, float]] | None = None,
    training_step: Callable[[Any, Any], Any] | None = None,
    batch_factory: Callable[[int], Any] | None = None,
    train_steps: int = 20,
    optimizer_factory: Callable[[Any], Any] | None = None,
    training_tolerance: Mapping[str, TrainingTolerance] | None = None,
    performance: bool = True,
    batch_sizes: Sequence[int] | None = None,
    iterations: int = 10,
    warmup: int = 2,
    compile_model: bool = False,
    unit: Unit | str | None = None,
    units_per_sample: float | None = None,
    prices: PriceTable | str | None = None,
    min_throughput_ratio: float | None = None,
    max_memory_ratio: float | None = None,
    baseline: Mapping[str, Any] | str | None = None,
    regression_tolerance: float = 0.1,
    show_progress: bool | None = None,
    model_name: str | None = None,
) -> CompareResult:
    """Compare one model on two devices: numeric parity, training curves, speed, memory and cost.

    `model_factory` returns a torch.nn.Module (called once under `seed`; each side gets a copy, so
    both start from the same weights). `inputs_factory` takes a batch size, or nothing (a fixed
    sample), or is the sample itself. A device is `BACKEND[:PRECISION]` ('cpu', 'cpu:bf16',
    'cpu:no-fp64', 'neuron-emulated'); `precision` overrides the target's policy. `training_step(model, batch)`
    returns a loss and switches on training mode for `train_steps` steps. Comparing a device with
    itself gives status 'self-comparison', never 'pass': so does one backend against itself where
    neither policy changed anything (`cpu` against `cpu:no-fp64` on a model without float64
    tensors). `result.side_effects` says what each policy changed. See `CompareResult` for what comes back.
    """
    import torch

    from torchport import __version__

    reference_spec = parse_device(reference, reference_precision)
    target_spec = parse_device(target, precision)
    if inputs_factory is None and training_step is None:
        raise UsageError("compare needs inputs: pass inputs_factory (a batch size -> inputs function, or a sample).")
    table = merge_thresholds(thresholds)
    # Fail early, naming the backends usable here; and bring both devices up before anything runs:
    # autograd sizes its per-device queues at the first backward of the process.
    for spec in (reference_spec, target_spec):
        spec.device
    model = _build_model(model_factory, seed)
    inputs_for, sizable = inputs_sizer(inputs_factory, seed) if inputs_factory is not None else (None, False)
    sizes = list(batch_sizes or ([1, 4] if sizable else [None]))
    if any(size is not None and size < 1 for size in sizes):
        raise UsageError(f"Batch sizes {sizes!r} must be positive integers. Example: batch_sizes=[1, 4, 16].")
    result = CompareResult(
        reference=reference_spec.label,
        target=target_spec.label,
        # Decided after the runs, from what each side's policy actually changed.
        self_comparison=False,
        model=model_name or type(model).__name__,
        seed=seed,
        thresholds={name: limits.to_dict() for name, limits in table.items()},
        environment={"torchport": __version__, "torch": torch.__version__, "python": platform.python_version(),
                     "machine": platform.machine()},
    )
    with progress_reporter(show_progress) as report, track_effects() as effects:
        if parity and inputs_for is not None:
            result.parity = run_parity(model, inputs_for(sizes[0]), reference_spec, target_spec, table, per_op, report,
                                       seed)
        if training_step is not None:
            batches = batch_factory or (lambda step: inputs_for(sizes[0]))
            result.training = run_training(model, reference_spec, target_spec, training_step, batches, train_steps,
                                           seed, optimizer_factory, training_tolerance, report)
        if performance and inputs_for is not None:
            sample_batch = _first_dimension(inputs_for(None)) if sizes == [None] else None
            measured_sizes = [size or sample_batch or 1 for size in sizes]
            chosen_unit = _unit(unit, units_per_sample)
            for side_name, spec in (("reference", reference_spec), ("target", target_spec)):
                result.performance[side_name] = measure_side(
                    model, spec, side_name, inputs_for, measured_sizes, chosen_unit.per_sample, iterations, warmup,
                    compile_model, progress=report)
            price_table = prices if isinstance(prices, PriceTable) else load_prices(prices)
            result.cost = compute_cost(result.performance["reference"], result.performance["target"],
                                       reference_spec.backend_name, target_spec.backend_name, chosen_unit, price_table)
            result.performance_checks = _performance_checks(result, min_throughput_ratio, max_memory_ratio)
    result.side_effects = {"reference": effects["reference"], "target": effects["target"]}
    result.self_comparison = same_computation(reference_spec, target_spec, result.side_effects)
    if baseline is not None:
        from torchport.compare.baseline import find_regressions, load_baseline

        old = load_baseline(baseline) if isinstance(baseline, str) else dict(baseline)
        result.baseline = baseline if isinstance(baseline, str) else "(in memory)"
        result.regressions = find_regressions(result.to_dict(), old, regression_tolerance)
    return result


def _first_dimension(inputs: Any) -> int | None:
    from torchport.compare.tree import flatten_tensors

    for _, tensor in flatten_tensors(inputs):
        if tensor.dim() > 0:
            return int(tensor.shape[0])
    return None
