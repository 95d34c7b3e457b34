"""The outcome of a comparison, as one object that every report renders."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

__all__ = ["SCHEMA_VERSION", "PerformanceCheck", "CompareResult", "STATUS_PASS", "STATUS_FAIL", "STATUS_SELF"]

#: Bumped when the JSON layout changes incompatibly.
SCHEMA_VERSION = "1.1"
STATUS_PASS = "pass"
STATUS_FAIL = "fail"
STATUS_SELF = "self-comparison"


@dataclass
class PerformanceCheck:
    """One performance gate: a measured ratio against its limit."""

    name: str
    value: float | None
    limit: float
    passed: bool
    message: str

    def to_dict(self) -> dict[str, Any]:
        """The gate as plain data."""
        return dict(self.__dict__)


@dataclass
class CompareResult:
    """Everything compare found: parity, training, performance, cost, regressions, verdict."""

    reference: str
    target: str
    self_comparison: bool
    model: str
    seed: int
    thresholds: dict[str, dict[str, float]]
    parity: Any = None
    training: Any = None
    performance: dict[str, Any] = field(default_factory=dict)
    cost: Any = None
    performance_checks: list[PerformanceCheck] = field(default_factory=list)
    regressions: list[Any] = field(default_factory=list)
    baseline: str | None = None
    environment: dict[str, str] = field(default_factory=dict)
    #: What each side's precision policy changed ('reference'/'target' -> SideEffects); not in the JSON.
    side_effects: dict[str, Any] = field(default_factory=dict)
    created: str = field(default_factory=lambda: datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))

    @property
    def reasons(self) -> list[str]:
        """Why the comparison does not pass (empty when it does)."""
        reasons = []
        if self.self_comparison:
            if self.reference == self.target:
                reasons.append(f"self-comparison: reference and target are both {self.reference!r}; "
                               "compare two different devices or precision policies")
            else:
                reasons.append(f"self-comparison: {self.reference!r} and {self.target!r} ran the same computation "
                               "on one backend (no tensor downcast, no autocast on either side); compare two "
                               "different devices, or a policy that changes this model (e.g. bf16)")
        if self.parity is not None and not self.parity.passed:
            failed = len(self.parity.failed_nodes)
            first = self.parity.first_divergence
            problem = self.parity.coverage.model_output_problem
            if problem:
                reasons.append(f"parity: nothing of the model's output was compared: {problem}")
            if failed or not problem:
                reasons.append(f"parity: {failed} node(s) disagree"
                               + (f", first divergence at {first!r}" if first else ""))
            if self.parity.unmatched:
                reasons.append(f"parity: nodes on one side only: {self.parity.unmatched[:5]}")
        if self.training is not None and not self.training.passed:
            reasons += [f"training: {reason}" for reason in self.training.reasons]
        reasons += [f"performance: {check.message}" for check in self.performance_checks if not check.passed]
        reasons += [f"regression: {regression.message}" for regression in self.regressions]
        return reasons

    @property
    def status(self) -> str:
        """'self-comparison' when both sides are the same, else 'pass' or 'fail'."""
        if self.self_comparison:
            return STATUS_SELF
        return STATUS_FAIL if self.reasons else STATUS_PASS

    @property
    def passed(self) -> bool:
        """True only for a real comparison with nothing outside the thresholds."""
        return self.status == STATUS_PASS

    @property
    def exit_code(self) -> int:
        """0 when it passes, 1 otherwise (a self-comparison is not a pass)."""
        return 0 if self.passed else 1

    def to_dict(self) -> dict[str, Any]:
        """The result as the JSON document described by the published schema."""
        from torchport.compare.reports.json_report import to_document

        return to_document(self)
