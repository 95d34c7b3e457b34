"""Speed and memory of one side over a sweep of batch sizes: warm-up (and compile) time, number of
compilations, latency percentiles, throughput in samples and in units of work, peak memory."""

from __future__ import annotations

import contextlib
import copy
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from torchport.compare.devices import DeviceSpec, move_to, precision_context, prepare_model, side

__all__ = ["BatchPerformance", "SidePerformance", "MemoryMeasurement", "measure_side", "measure_memory", "percentile",
           "tensor_bytes"]


@dataclass
class BatchPerformance:
    """Measurements for one batch size on one side."""

    batch_size: int
    warmup_seconds: float
    compilations: int | None
    latencies_ms: list[float]
    p50_ms: float
    p95_ms: float
    p99_ms: float
    mean_ms: float
    samples_per_second: float
    units_per_second: float
    #: None when memory could not be measured; `memory_note` says why.
    peak_memory_bytes: int | None
    memory_source: str
    memory_note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The measurements as plain data."""
        return dict(self.__dict__)


@dataclass
class SidePerformance:
    """The sweep on one side."""

    device: str
    compiled: bool
    batches: list[BatchPerformance] = field(default_factory=list)

    def best(self) -> BatchPerformance | None:
        """The batch size with the highest throughput."""
        return max(self.batches, key=lambda item: item.units_per_second, default=None)

    def at(self, batch_size: int) -> BatchPerformance | None:
        """The measurements at `batch_size`, if measured."""
        return next((item for item in self.batches if item.batch_size == batch_size), None)

    def to_dict(self) -> dict[str, Any]:
        """The sweep as plain data."""
        return {"device": self.device, "compiled": self.compiled, "batches": [item.to_dict() for item in self.batches]}


def percentile(values: list[float], share: float) -> float:
    """The `share` (0..1) percentile of `values`, linearly interpolated."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    position = share * (len(ordered) - 1)
    lower = int(position)
    upper = min(lower + 1, len(ordered) - 1)
    return ordered[lower] + (ordered[upper] - ordered[lower]) * (position - lower)


def tensor_bytes(value: Any) -> int:
    """Bytes held by the tensors in a module or a (nested) value, each storage counted once."""
    import torch

    from torchport.compare.tree import flatten_tensors

    if isinstance(value, torch.nn.Module):
        tensors = [*value.parameters(), *value.buffers()]
    else:
        tensors = [tensor for _, tensor in flatten_tensors(value)]
    seen: dict[Any, int] = {}
    for tensor in tensors:
        try:
            storage = tensor.untyped_storage()
            seen[(storage.data_ptr(), tensor.device)] = storage.nbytes()
        except Exception:
            seen[id(tensor)] = tensor.numel() * tensor.element_size()
    return sum(seen.values())


@dataclass
class MemoryMeasurement:
    """Peak memory of one forward, where it came from, and why it is missing when it is."""

    peak_bytes: int | None
    source: str
    note: str | None = None


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Silence file descriptor 2 while the profiler starts and stops: its C++ side prints a
    'profiler_start'/'profiler_stop' line there at every session, whatever the log level."""
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no file descriptor 2 (an embedded interpreter): nothing to silence
        yield
        return
    try:
        with open(os.devnull, "w") as sink:
            os.dup2(sink.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _profiled_peak(forward: Callable[[], Any]) -> tuple[Any, int | None, str | None]:
    """(output, peak bytes allocated while `forward` ran, None) from the profiler's memory events,
    which observe the allocator without entering dispatch; (output, None, why) when they cannot."""
    import torch
    from torch.autograd.profiler import profile

    try:
        profiler = profile(profile_memory=True)
        with _quiet_stderr():
            profiler.__enter__()
        try:
            # A known allocation proves the profiler sees the allocator in this build.
            sentinel = torch.empty(16, dtype=torch.uint8)
            del sentinel
            output = forward()
        finally:
            with _quiet_stderr():
                profiler.__exit__(None, None, None)
        events = [event for event in profiler.kineto_results.events() if event.name() == "[memory]"]
    except Exception as error:
        return None, None, f"the profiler could not record memory events ({type(error).__name__}: {error})"
    if not events:
        return output, None, "the profiler recorded no allocation events"
    live = peak = 0
    for event in sorted(events, key=lambda item: item.start_ns()):
        live += event.nbytes()
        peak = max(peak, live)
    return output, peak, None


def measure_memory(forward: Callable[[], Any], backend, model, inputs: Any) -> MemoryMeasurement:
    """Peak memory of one more call of `forward`, by the least intrusive means that works.

    The device allocator's peak when the backend keeps one; else the weights, the inputs and the
    peak of the allocations the profiler saw during the call. Measuring never changes what runs:
    when a measurement cannot be taken the call runs without it and the peak is None ("not measured").
    """
    if backend.is_accelerator():
        backend.reset_peak_memory_stats()
    forward()
    backend.synchronize()
    peak = backend.memory_stat("max_memory_allocated")
    if peak > 0:
        return MemoryMeasurement(int(peak), "device allocator")
    _, activations, why = _profiled_peak(forward)
    if activations is None:
        return MemoryMeasurement(None, "not measured", why)
    return MemoryMeasurement(tensor_bytes(model) + tensor_bytes(inputs) + activations,
                             "profiler memory events (weights + inputs + peak allocations)")


def _compilation_count(backend) -> int | None:
    """Compilations the device reports (a `compilation_count()` on the backend), else None."""
    counter = getattr(backend, "compilation_count", None)
    if callable(counter):
        try:
            return int(counter())
        except Exception:
            return None
    return None


def _dynamo_graphs() -> int:
    try:
        from torch._dynamo.utils import counters
    except Exception:
        return 0
    return int(counters["stats"].get("unique_graphs", 0))


def measure_side(
    model,
    spec: DeviceSpec,
    side_name: str,
    inputs_for: Callable[[int], Any],
    batch_sizes: list[int],
    units_per_sample: float,
    iterations: int,
    warmup: int,
    compile_model: bool = False,
    call: Callable[[Any, Any], Any] | None = None,
    progress: Callable[[str], None] | None = None,
) -> SidePerformance:
    """Time `model` on one side at each batch size. No absolute limits here: callers judge ratios."""
    import torch

    from torchport.compare.parity import call_model

    call = call or call_model
    backend = spec.backend
    prepared = prepare_model(copy.deepcopy(model), spec, side_name).eval()
    runnable = torch.compile(prepared) if compile_model else prepared
    result = SidePerformance(device=spec.label, compiled=compile_model)
    for batch_size in batch_sizes:
        inputs = move_to(inputs_for(batch_size), spec.device, downcast_float64=spec.downcasts_float64,
                         side_name=side_name)

        def forward():
            with precision_context(spec, side_name):
                return call(runnable, inputs)

        with torch.no_grad(), side(side_name):
            compilations_before = _compilation_count(backend)
            graphs_before = _dynamo_graphs() if compile_model else 0
            started = time.perf_counter()
            forward()
            backend.synchronize()
            warmup_seconds = time.perf_counter() - started
            for _ in range(max(0, warmup - 1)):
                forward()
            backend.synchronize()
            compilations_after = _compilation_count(backend)
            if compilations_after is not None and compilations_before is not None:
                compilations: int | None = compilations_after - compilations_before
            elif compile_model:
                compilations = _dynamo_graphs() - graphs_before
            else:
                compilations = None
            latencies = []
            for _ in range(iterations):
                started = time.perf_counter()
                forward()
                backend.synchronize()
                latencies.append((time.perf_counter() - started) * 1000.0)
                if progress:
                    progress(f"timing {spec.label} at batch size {batch_size}")
            memory = measure_memory(forward, backend, prepared, inputs)
        mean = statistics.fmean(latencies) if latencies else 0.0
        samples_per_second = batch_size / (mean / 1000.0) if mean > 0 else 0.0
        result.batches.append(
            BatchPerformance(
                batch_size=batch_size,
                warmup_seconds=warmup_seconds,
                compilations=compilations,
                latencies_ms=latencies,
                p50_ms=percentile(latencies, 0.50),
                p95_ms=percentile(latencies, 0.95),
                p99_ms=percentile(latencies, 0.99),
                mean_ms=mean,
                samples_per_second=samples_per_second,
                units_per_second=samples_per_second * units_per_sample,
                peak_memory_bytes=memory.peak_bytes,
                memory_source=memory.source,
                memory_note=memory.note,
            )
        )
    return result
