"""The compile report: compilations, bucket hits, where each op ran and why, what ran eagerly."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

__all__ = ["CompileReport", "OpPlacement"]

TARGET = "target"
HOST = "host"


@dataclass
class OpPlacement:
    """One ATen op in a compiled graph: where it ran (target or host), why, and how often it was placed."""

    op: str
    where: str
    reason: str
    graphs: int = 0

    def to_dict(self) -> dict:
        return {"op": self.op, "where": self.where, "reason": self.reason, "graphs": self.graphs}


@dataclass
class CompileReport:
    """What a compiled model did, for `torchport.compile(...).report` and `torchport run --compile`."""

    target: str
    compiler: str
    calls: int = 0
    compilations: int = 0
    compile_seconds: float = 0.0
    #: shape signatures (after padding) that were compiled, in order
    compiled_shapes: list = field(default_factory=list)
    bucket_hits: int = 0
    padded_calls: int = 0
    eager_calls: int = 0
    placement: dict[str, OpPlacement] = field(default_factory=dict)
    #: dimension label -> {"buckets": [...], "padded": bool, "reason": str}
    bucketing: dict[str, dict] = field(default_factory=dict)
    precision: str = "keep"
    eager_reasons: list[str] = field(default_factory=list)
    #: why the model could not be compiled (it runs eagerly from then on); "" when it compiled
    failure: str = ""
    notes: list[str] = field(default_factory=list)

    # -- recording ---------------------------------------------------------------------------
    def compiled(self, signature, seconds: float) -> None:
        self.compilations += 1
        self.compile_seconds += seconds
        self.compiled_shapes.append(signature)

    def place(self, op: str, where: str, reason: str) -> None:
        entry = self.placement.get(op)
        if entry is None:
            entry = self.placement[op] = OpPlacement(op, where, reason)
        entry.graphs += 1

    def ran_eagerly(self, reason: str) -> None:
        if reason not in self.eager_reasons:
            self.eager_reasons.append(reason)

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    # -- views -------------------------------------------------------------------------------
    def host_ops(self) -> list[OpPlacement]:
        """The ops placed on the host (fallback), with their reasons."""
        return [entry for entry in self.placement.values() if entry.where == HOST]

    def to_dict(self) -> dict:
        return {
            "target": self.target,
            "compiler": self.compiler,
            "precision": self.precision,
            "calls": self.calls,
            "compilations": self.compilations,
            "compile_seconds": round(self.compile_seconds, 3),
            "compiled_shapes": [repr(signature) for signature in self.compiled_shapes],
            "bucket_hits": self.bucket_hits,
            "padded_calls": self.padded_calls,
            "eager_calls": self.eager_calls,
            "eager_reasons": list(self.eager_reasons),
            "not_compiled": self.failure or None,
            "bucketing": dict(self.bucketing),
            "placement": [entry.to_dict() for entry in sorted(self.placement.values(), key=lambda e: (e.where, e.op))],
            "notes": list(self.notes),
        }

    def json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def summary(self) -> str:
        """One paragraph: compilations, bucket hits, fallbacks, compile time, what ran eagerly."""
        host = self.host_ops()
        parts = [
            f"{self.compilations} compilation(s) with {self.compiler} for {self.target} "
            f"in {self.compile_seconds:.1f} s over {self.calls} call(s)",
            f"{self.bucket_hits} bucket hit(s), {self.padded_calls} padded call(s)",
        ]
        if host:
            parts.append("on the host: " + ", ".join(f"{entry.op} ({entry.reason})" for entry in host))
        if self.eager_calls:
            parts.append(f"{self.eager_calls} call(s) ran eagerly: " + "; ".join(self.eager_reasons))
        return "; ".join(parts) + "."

    def text(self) -> str:
        """The placement report as text: every op of the compiled graphs, where it ran and why."""
        lines = [self.summary(), f"precision: {self.precision}"]
        for label, decision in self.bucketing.items():
            state = f"padded to {decision['buckets']}" if decision["padded"] else f"not padded: {decision['reason']}"
            lines.append(f"  dimension {label}: {state}")
        lines.append("placement:")
        for entry in sorted(self.placement.values(), key=lambda e: (e.where, e.op)):
            lines.append(f"  {entry.where:6} {entry.op:40} {entry.reason}")
        lines.extend(f"note: {note}" for note in self.notes)
        return "\n".join(lines)
