"""Shadow comparison: the primary's and the fallback's outputs for the same live input, judged with
compare's parity metrics and pass rule (`torchport.compare.metrics`).

The fallback (the platform being left) is the reference. A comparison that fails the rule is a
mismatch; `alarm_after` mismatches among the last `window` comparisons raise the drift alarm, which
stays raised while they remain in the window. The monitor keeps the last mismatch's reasons (which
output, which metric, or the primary's failure) and tells its listener when the alarm rises and
clears, so that the reason reaches the log and /readyz.
"""

from __future__ import annotations

import collections
import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from torchport.compare.metrics import Thresholds, judge, tensor_metrics, threshold_for, worst

__all__ = ["ShadowMonitor", "ShadowResult", "compare_outputs"]


@dataclass
class ShadowResult:
    """One comparison of the two devices' outputs for one input."""

    agree: bool
    reasons: list[str] = field(default_factory=list)
    cosine: float | None = None
    max_abs: float | None = None


def compare_outputs(reference: Any, target: Any, thresholds: Mapping[str, Thresholds] | None = None,
                    downcasts: Mapping[str, str] | None = None) -> ShadowResult:
    """Judge `target` (primary) against `reference` (fallback); both on the host, any nesting of tensors.
    `downcasts` ({'float64': 'float32'}: the primary profile's narrower types) are not dtype mismatches.
    Integer and boolean outputs (token ids, labels, masks) must be equal: a tolerance scaled by their
    magnitude would let id 10753 pass for 10752. A float computed in the profile's narrower type is
    judged at that type's limits (float64 computed as float32 at float32's). Python values beside the
    tensors (a label from `.item()`, a string) are compared too: numbers as float32 would be, the
    rest equal."""
    from torchport.compare.tree import flatten

    import torch

    downcasts = downcasts or {}
    expected_flat, actual_flat = flatten(reference), flatten(target)
    expected_paths = [path for path, _ in expected_flat.tensors]
    actual_paths = [path for path, _ in actual_flat.tensors]
    if expected_paths != actual_paths or expected_flat.others != actual_flat.others:
        return ShadowResult(False, [f"output structure differs: tensors {expected_paths} vs {actual_paths}"])
    reasons: list[str] = []
    measured = []
    for (path, expected), (_, actual) in zip(expected_flat.tensors, actual_flat.tensors):
        reference_dtype = str(expected.dtype).removeprefix("torch.")
        metrics = tensor_metrics(expected, actual, dtype_allowed=downcasts.get(reference_dtype))
        _, limits = threshold_for([metrics.dtype_reference, metrics.dtype_target,
                                   downcasts.get(reference_dtype, reference_dtype)], thresholds)
        found = judge(metrics, limits)
        if not found and _exact(expected) and expected.shape == actual.shape and not torch.equal(expected, actual.to(expected.dtype)):
            differing = int((expected != actual.to(expected.dtype)).sum())
            found = [f"{differing} of {expected.numel()} {reference_dtype} elements differ (integer outputs must be equal)"]
        reasons += [f"output {path or 'tensor'}: {reason}" for reason in found]
        measured.append(metrics)
    reasons += _python_values_differ(reference, target, threshold_for(["float32"], thresholds)[1])
    summary = worst(measured) if measured else {}
    return ShadowResult(not reasons, reasons, summary.get("cosine"), summary.get("max_abs"))


def _python_values_differ(reference: Any, target: Any, limits: Thresholds) -> list[str]:
    """What differs among the values that are not tensors (same paths and types, checked before)."""
    import numbers

    import torch

    from torchport.compare.tree import _leaves_with_paths

    if isinstance(reference, torch.Tensor):
        return []
    reasons = []
    pairs = zip(_leaves_with_paths(reference), _leaves_with_paths(target))
    for (path, expected), (_, actual) in pairs:
        if isinstance(expected, torch.Tensor) or expected is None:
            continue
        if isinstance(expected, numbers.Real) and not isinstance(expected, (bool, numbers.Integral)):
            allowed = limits.max_abs * max(1.0, abs(float(expected)))
            if not abs(float(actual) - float(expected)) <= allowed:
                reasons.append(f"value {path}: {actual!r} vs {expected!r} (allowed {allowed:.3g})")
        elif actual != expected:
            reasons.append(f"value {path}: {actual!r} vs {expected!r}")
    return reasons


def _exact(tensor) -> bool:
    return not (tensor.is_floating_point() or tensor.is_complex())


class ShadowMonitor:
    """Counts comparisons and mismatches and keeps the drift alarm; thread-safe."""

    def __init__(self, alarm_after: int = 3, window: int = 100, thresholds: Mapping[str, Thresholds] | None = None,
                 downcasts: Mapping[str, str] | None = None,
                 on_alarm: Callable[[bool, ShadowResult], None] | None = None):
        if alarm_after < 1 or window < alarm_after:
            from torchport.errors import UsageError

            raise UsageError(f"Shadow alarm_after={alarm_after!r}, window={window!r}: need 1 <= alarm_after <= window.")
        self.alarm_after = alarm_after
        self.thresholds = thresholds
        self.downcasts = dict(downcasts or {})
        self._recent: collections.deque[bool] = collections.deque(maxlen=window)
        self._lock = threading.RLock()  # the alarm listener reads the counts under it
        self.comparisons = 0
        self.mismatches = 0
        self.alarms_raised = 0
        self.alarm = False
        self.last: ShadowResult | None = None
        #: The last comparison that mismatched (None: none has).
        self.last_mismatch: ShadowResult | None = None
        #: Called with (raised, the comparison that changed it) when the alarm rises or clears.
        self._on_alarm = on_alarm
        #: The comparison count at which the alarm was first raised (None: never).
        self.first_alarm_at: int | None = None

    def observe(self, reference: Any, target: Any) -> ShadowResult:
        """Compare one pair and update the counts and the alarm."""
        return self.record(compare_outputs(reference, target, self.thresholds, self.downcasts))

    def record(self, result: ShadowResult) -> ShadowResult:
        """Count one comparison's result (a primary that failed the input is a mismatch)."""
        with self._lock:
            self.comparisons += 1
            self.mismatches += not result.agree
            self._recent.append(not result.agree)
            alarm = sum(self._recent) >= self.alarm_after
            if alarm and not self.alarm:
                self.alarms_raised += 1
                if self.first_alarm_at is None:
                    self.first_alarm_at = self.comparisons
            changed = alarm != self.alarm
            self.alarm = alarm
            self.last = result
            if not result.agree:
                self.last_mismatch = result
            if changed and self._on_alarm is not None:
                # under the lock, so that a rise and a clear reach the listener in their order; a
                # listener that fails (the log's handler) does not fail the comparison's request
                try:
                    self._on_alarm(alarm, result)
                except Exception:
                    logging.getLogger("torchport.serve").debug("the drift alarm's listener failed", exc_info=True)
        return result

    @property
    def recent_mismatches(self) -> int:
        """Mismatches among the comparisons in the window."""
        with self._lock:
            return sum(self._recent)

    @property
    def recent_comparisons(self) -> int:
        """Comparisons in the window (up to its size)."""
        with self._lock:
            return len(self._recent)
