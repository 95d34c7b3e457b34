"""Prometheus metrics of a deployment, one registry per deployment (`prometheus_client`).

Every name starts with `torchport_serve_`; `role` is primary or fallback, `device` the backend
name. Without prometheus_client installed a deployment still serves and counts nothing here
(`NullMetrics`); the server needs it and says which extra to install.
"""

from __future__ import annotations

import math
import os
from typing import Callable, Iterable

from torchport.errors import UsageError

__all__ = ["ServeMetrics", "NullMetrics", "make_metrics", "require_prometheus", "METRIC_NAMES", "LATENCY_BUCKETS"]

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

#: Every metric with its type and labels: the one list the README's Grafana table follows.
METRIC_NAMES = {
    "torchport_serve_requests_total": ("counter", "role, device, outcome (ok | failover)"),
    "torchport_serve_request_latency_seconds": ("histogram", "role, device (the device that answered)"),
    "torchport_serve_queue_wait_seconds": ("histogram", "time a request waited for a place under the concurrency limit"),
    "torchport_serve_failovers_total": ("counter", "cause (error | timeout | nonfinite | oom | bad_output)"),
    "torchport_serve_load_failures_total": ("counter", "role, device (the model could not be moved there at start)"),
    "torchport_serve_routed_to_fallback_total": ("counter", "reason (canary | breaker_open | out_of_range)"),
    "torchport_serve_fallback_failures_total": ("counter", "requests routed to the fallback that it failed and the primary answered"),
    "torchport_serve_breaker_state": ("gauge", "0 closed, 1 open, 2 half-open"),
    "torchport_serve_breaker_transitions_total": ("counter", "to (closed | open | half_open)"),
    "torchport_serve_probes_total": ("counter", "result (success | failure | inconclusive)"),
    "torchport_serve_shadow_comparisons_total": ("counter", ""),
    "torchport_serve_shadow_mismatches_total": ("counter", ""),
    "torchport_serve_shadow_skipped_total": ("counter", "reason (busy | failed | out_of_range)"),
    "torchport_serve_shadow_drift_alarm": ("gauge", "1 while the drift alarm is raised"),
    "torchport_serve_shadow_last_cosine": ("gauge", "cosine of the last comparison (NaN: not measurable)"),
    "torchport_serve_shadow_last_max_abs_error": ("gauge", "max abs error of the last comparison (NaN: not measurable)"),
    "torchport_serve_contract_checks_total": ("counter", "result (learned | agreed | differed | fallback_failed): "
                                              "outputs outside the output contract judged by the fallback's answer"),
    "torchport_serve_rejected_total": ("counter", "reason (invalid_input | payload_too_large | body_timeout | client_disconnected | overloaded | draining | "
                                       "preprocess_error | postprocess_error | ...)"),
    "torchport_serve_in_flight": ("gauge", "requests being answered"),
    "torchport_serve_abandoned_calls": ("gauge", "primary calls past their timeout still running"),
    "torchport_serve_device_memory_bytes": ("gauge", "role, device, stat (allocated | peak_allocated | process_resident)"),
}


def require_prometheus():
    """The prometheus_client module, or a usage error naming the extra to install."""
    try:
        import prometheus_client
    except ImportError as error:
        raise UsageError("The serve metrics need prometheus_client, which is not installed. "
                         "Install the extra: pip install 'torchport[serve]'.") from error
    return prometheus_client


class NullMetrics:
    """Accepts every call and records nothing."""

    registry = None

    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args, **kwargs: None


def _process_resident_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class ServeMetrics:
    """The collectors of one deployment; `memory_source()` yields (role, device, backend) at scrape time."""

    def __init__(self, memory_source: Callable[[], Iterable[tuple[str, str, object]]]):
        prometheus = require_prometheus()
        from prometheus_client.core import GaugeMetricFamily

        self.registry = prometheus.CollectorRegistry()
        counter = lambda name, help, labels=(): prometheus.Counter(name, help, labels, registry=self.registry)
        gauge = lambda name, help, labels=(): prometheus.Gauge(name, help, labels, registry=self.registry)
        self._requests = counter("torchport_serve_requests", "Requests answered, by device and outcome",
                                 ("role", "device", "outcome"))
        self._latency = prometheus.Histogram("torchport_serve_request_latency_seconds",
                                             "Request latency in the runtime, by the device that answered",
                                             ("role", "device"), buckets=LATENCY_BUCKETS, registry=self.registry)
        self._queue_wait = prometheus.Histogram("torchport_serve_queue_wait_seconds",
                                                "Time a request waited for a place under the concurrency limit "
                                                "before the runtime took it", buckets=LATENCY_BUCKETS,
                                                registry=self.registry)
        self._failovers = counter("torchport_serve_failovers", "Requests failed over to the fallback, by cause", ("cause",))
        self._load_failures = counter("torchport_serve_load_failures", "Devices the model could not be moved to at start",
                                      ("role", "device"))
        self._routed = counter("torchport_serve_routed_to_fallback", "Requests sent straight to the fallback", ("reason",))
        self._fallback_failures = counter("torchport_serve_fallback_failures",
                                          "Requests routed to the fallback that it failed and the primary answered")
        self._breaker = gauge("torchport_serve_breaker_state", "Breaker state: 0 closed, 1 open, 2 half-open")
        self._transitions = counter("torchport_serve_breaker_transitions", "Breaker transitions", ("to",))
        self._probes = counter("torchport_serve_probes", "Background probes of the primary", ("result",))
        self._comparisons = counter("torchport_serve_shadow_comparisons", "Shadow comparisons made")
        self._mismatches = counter("torchport_serve_shadow_mismatches", "Shadow comparisons outside the parity limits")
        self._skipped = counter("torchport_serve_shadow_skipped", "Shadow comparisons not made", ("reason",))
        self._alarm = gauge("torchport_serve_shadow_drift_alarm", "1 while the shadow drift alarm is raised")
        self._cosine = gauge("torchport_serve_shadow_last_cosine", "Cosine similarity of the last shadow comparison")
        self._max_abs = gauge("torchport_serve_shadow_last_max_abs_error", "Max abs error of the last shadow comparison")
        for last in (self._cosine, self._max_abs):  # nothing measured yet (or shadow off): not a perfect 0 or a 0.0
            last.set(math.nan)
        self._rejected = counter("torchport_serve_rejected", "Requests refused, by reason", ("reason",))
        self._contract = counter("torchport_serve_contract_checks",
                                 "Primary outputs outside the output contract held against the fallback's answer, "
                                 "by result", ("result",))
        self._in_flight = gauge("torchport_serve_in_flight", "Requests being answered")
        self._abandoned = gauge("torchport_serve_abandoned_calls", "Primary calls past their timeout still running")
        self._breaker.set(0)
        self._answered_children: dict[tuple[str, str, str], tuple] = {}

        class MemoryCollector:
            def collect(self):
                family = GaugeMetricFamily("torchport_serve_device_memory_bytes",
                                           "Device memory in bytes (process resident memory for the host CPU)",
                                           labels=("role", "device", "stat"))
                for role, device, backend in memory_source():
                    if backend.is_accelerator():
                        family.add_metric((role, device, "allocated"), backend.memory_stat("memory_allocated"))
                        family.add_metric((role, device, "peak_allocated"), backend.memory_stat("max_memory_allocated"))
                    else:
                        resident = _process_resident_bytes()
                        if resident is not None:
                            family.add_metric((role, device, "process_resident"), resident)
                yield family

        self.registry.register(MemoryCollector())

    def answered(self, role: str, device: str, outcome: str, seconds: float) -> None:
        # On every request's path: the labelled children are looked up once and kept.
        key = (role, device, outcome)
        children = self._answered_children.get(key)
        if children is None:
            children = self._answered_children[key] = (self._requests.labels(role, device, outcome),
                                                       self._latency.labels(role, device))
        children[0].inc()
        children[1].observe(seconds)

    def queued(self, seconds: float) -> None:
        """A request waited `seconds` at the concurrency limit before it ran (0 when a place was free)."""
        self._queue_wait.observe(seconds)

    def watch(self, in_flight: Callable[[], float], abandoned: Callable[[], float]) -> None:
        """Read the in-flight and abandoned counts at scrape time instead of setting them per request."""
        self._in_flight.set_function(in_flight)
        self._abandoned.set_function(abandoned)

    def load_failed(self, role: str, device: str) -> None:
        self._load_failures.labels(role, device).inc()

    def failover(self, cause: str) -> None:
        self._failovers.labels(cause).inc()

    def contract_check(self, result: str) -> None:
        """An output outside the contract judged by the fallback's answer: 'learned' (it agreed, the
        input layout is learned), 'agreed' (it agreed; past the layouts learned, the fallback runs
        for every such request), 'differed', 'fallback_failed'."""
        self._contract.labels(result).inc()

    def routed_to_fallback(self, reason: str) -> None:
        self._routed.labels(reason).inc()

    def fallback_failed(self) -> None:
        """A request routed to the fallback that it failed (raised, NaN or inf) and the primary answered:
        the fallback, not the input, is at fault."""
        self._fallback_failures.inc()

    def breaker_changed(self, state: str) -> None:
        from torchport.serve.breaker import STATE_VALUES

        self._breaker.set(STATE_VALUES[state])
        self._transitions.labels(state).inc()

    def probe(self, success: bool | None) -> None:
        """A probe's result; None: inconclusive (the fallback rejects its input too)."""
        self._probes.labels("inconclusive" if success is None else "success" if success else "failure").inc()

    def shadow(self, result, alarm: bool) -> None:
        self._comparisons.inc()
        if not result.agree:
            self._mismatches.inc()
        self._alarm.set(int(alarm))
        # NaN when the last comparison could not measure them (the outputs' structure or shapes differ):
        # an earlier comparison's 1.0 must not stand for one that found the outputs incomparable
        self._cosine.set(math.nan if result.cosine is None else result.cosine)
        self._max_abs.set(math.nan if result.max_abs is None else result.max_abs)

    def shadow_skipped(self, reason: str) -> None:
        self._skipped.labels(reason).inc()

    def set_in_flight(self, count: int) -> None:
        self._in_flight.set(count)

    def set_abandoned(self, count: int) -> None:
        self._abandoned.set(count)

    def rejected(self, reason: str) -> None:
        self._rejected.labels(reason).inc()

    def exposition(self) -> tuple[bytes, str]:
        """The Prometheus text format and its content type."""
        prometheus = require_prometheus()
        return prometheus.generate_latest(self.registry), prometheus.CONTENT_TYPE_LATEST


def make_metrics(memory_source) -> ServeMetrics | NullMetrics:
    """ServeMetrics when prometheus_client is installed, NullMetrics otherwise."""
    try:
        return ServeMetrics(memory_source)
    except UsageError:
        return NullMetrics()
