"""Shadow comparison: the primary's and the fallback's outputs for the same live input, judged with
compare's parity metrics and pass rule (`torchport.compare.metrics`).

The fallback (the platform being left) is the reference. A comparison that fails the rule is a
mismatch; `alarm_after` mismatches among the last `window` comparisons raise the drift alarm, which
stays raised while they remain in the window.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass, field
from typing import Any, Mapping

from torchport.compare.metrics import Thresholds, judge, tensor_metrics, threshold_for, worst

__all__ = ["ShadowMonitor", "ShadowResult", "compare_outputs"]


@dataclass
class ShadowResult:
    """One comparison of the two devices' outputs for one input."""

    agree: bool
    reasons: list[str] = field(default_factory=list)
    cosine: float | None = None
    max_abs: float | None = None


def compare_outputs(reference: Any, target: Any, thresholds: Mapping[str, Thresholds] | None = None) -> ShadowResult:
    """Judge `target` (primary) against `reference` (fallback); both on the host, any nesting of tensors."""
    from torchport.compare.tree import flatten

    expected_flat, actual_flat = flatten(reference), flatten(target)
    expected_paths = [path for path, _ in expected_flat.tensors]
    actual_paths = [path for path, _ in actual_flat.tensors]
    if expected_paths != actual_paths or expected_flat.others != actual_flat.others:
        return ShadowResult(False, [f"output structure differs: tensors {expected_paths} vs {actual_paths}"])
    reasons: list[str] = []
    measured = []
    for (path, expected), (_, actual) in zip(expected_flat.tensors, actual_flat.tensors):
        metrics = tensor_metrics(expected, actual)
        _, limits = threshold_for([metrics.dtype_reference, metrics.dtype_target], thresholds)
        reasons += [f"output {path or 'tensor'}: {reason}" for reason in judge(metrics, limits)]
        measured.append(metrics)
    summary = worst(measured) if measured else {}
    return ShadowResult(not reasons, reasons, summary.get("cosine"), summary.get("max_abs"))


class ShadowMonitor:
    """Counts comparisons and mismatches and keeps the drift alarm; thread-safe."""

    def __init__(self, alarm_after: int = 3, window: int = 100, thresholds: Mapping[str, Thresholds] | None = None):
        if alarm_after < 1 or window < alarm_after:
            from torchport.errors import UsageError

            raise UsageError(f"Shadow alarm_after={alarm_after!r}, window={window!r}: need 1 <= alarm_after <= window.")
        self.alarm_after = alarm_after
        self.thresholds = thresholds
        self._recent: collections.deque[bool] = collections.deque(maxlen=window)
        self._lock = threading.Lock()
        self.comparisons = 0
        self.mismatches = 0
        self.alarms_raised = 0
        self.alarm = False
        self.last: ShadowResult | None = None
        #: The comparison count at which the alarm was first raised (None: never).
        self.first_alarm_at: int | None = None

    def observe(self, reference: Any, target: Any) -> ShadowResult:
        """Compare one pair and update the counts and the alarm."""
        result = compare_outputs(reference, target, self.thresholds)
        with self._lock:
            self.comparisons += 1
            self.mismatches += not result.agree
            self._recent.append(not result.agree)
            alarm = sum(self._recent) >= self.alarm_after
            if alarm and not self.alarm:
                self.alarms_raised += 1
                if self.first_alarm_at is None:
                    self.first_alarm_at = self.comparisons
            self.alarm = alarm
            self.last = result
        return result
