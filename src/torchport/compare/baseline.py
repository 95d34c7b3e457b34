"""Regressions against a saved run: parity that got worse, throughput that fell, memory that grew."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchport.errors import UsageError

__all__ = ["Regression", "load_baseline", "find_regressions", "in_current_vocabulary"]


@dataclass
class Regression:
    """One thing that is worse than in the baseline."""

    kind: str
    name: str
    old: float | str | None
    new: float | str | None
    message: str

    def to_dict(self) -> dict[str, Any]:
        """The regression as plain data."""
        return dict(self.__dict__)


def load_baseline(path: str | Path) -> dict[str, Any]:
    """A saved compare JSON document; errors name the file and what to pass instead."""
    path = Path(path)
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise UsageError(
            f"Cannot read baseline {str(path)!r}: {error.strerror}. Pass a JSON file written by 'torchport compare --json'."
        ) from error
    except json.JSONDecodeError as error:
        raise UsageError(
            f"Baseline {str(path)!r} is not JSON ({error.msg} at line {error.lineno}). "
            "Pass a file written by 'torchport compare --json'."
        ) from error
    if not isinstance(document, dict) or document.get("kind") != "torchport.compare":
        raise UsageError(
            f"Baseline {str(path)!r} is not a torchport compare document (no \"kind\": \"torchport.compare\"). "
            "Pass a file written by 'torchport compare --json'."
        )
    return in_current_vocabulary(document)


def in_current_vocabulary(document: dict[str, Any]) -> dict[str, Any]:
    """`document` with its device labels in today's precision vocabulary (a copy where any changed).

    Older result files spell the default policy 'native' ('cpu:native') and no-fp64 'fp32'; reports
    and regression messages then name the sides as today's documents do ('cpu', 'cpu:no-fp64').
    """
    from torchport.compare.devices import canonical_label

    document = dict(document)
    for key in ("reference", "target"):
        if key in document:
            document[key] = canonical_label(document[key])
    performance = document.get("performance")
    if isinstance(performance, dict):
        document["performance"] = {
            name: ({**side, "device": canonical_label(side["device"])}
                   if isinstance(side, dict) and "device" in side else side)
            for name, side in performance.items()
        }
    return document


def _parity_regressions(old: dict, new: dict) -> list[Regression]:
    found = []
    old_nodes = {node["name"]: node for node in (old.get("parity") or {}).get("nodes", [])}
    for node in (new.get("parity") or {}).get("nodes", []):
        before = old_nodes.get(node["name"])
        if before and before["passed"] and not node["passed"]:
            found.append(Regression("parity", node["name"], "pass", "fail",
                                    f"{node['name']!r} agreed in the baseline and now disagrees: {'; '.join(node['reasons'][:2])}"))
    return found


def _performance_regressions(old: dict, new: dict, tolerance: float) -> list[Regression]:
    found = []
    for side_name in ("reference", "target"):
        old_side = (old.get("performance") or {}).get(side_name) or {}
        new_side = (new.get("performance") or {}).get(side_name) or {}
        old_batches = {batch["batch_size"]: batch for batch in old_side.get("batches", [])}
        for batch in new_side.get("batches", []):
            before = old_batches.get(batch["batch_size"])
            if not before:
                continue
            label = f"{side_name} {new_side.get('device', '')} batch {batch['batch_size']}"
            if before["units_per_second"] > 0:
                change = batch["units_per_second"] / before["units_per_second"] - 1.0
                if change < -tolerance:
                    found.append(Regression("throughput", label, before["units_per_second"], batch["units_per_second"],
                                            f"throughput on {label} fell {-change:.0%} (allowed {tolerance:.0%})"))
            if before.get("peak_memory_bytes") and batch["peak_memory_bytes"] is None:
                found.append(Regression("memory", label, before["peak_memory_bytes"], None,
                                        f"peak memory on {label} was measured in the baseline and is not measured "
                                        f"now ({batch.get('memory_note') or 'no reason given'})"))
            elif before.get("peak_memory_bytes") and before["peak_memory_bytes"] > 0:
                change = batch["peak_memory_bytes"] / before["peak_memory_bytes"] - 1.0
                if change > tolerance:
                    found.append(Regression("memory", label, before["peak_memory_bytes"], batch["peak_memory_bytes"],
                                            f"peak memory on {label} grew {change:.0%} (allowed {tolerance:.0%})"))
    return found


def find_regressions(new: dict[str, Any], old: dict[str, Any], tolerance: float = 0.1) -> list[Regression]:
    """Everything in `new` worse than in `old`: parity nodes that stopped agreeing, a training run that
    stopped agreeing, throughput down or peak memory up by more than `tolerance` (a share, 0.1 = 10%)."""
    old = in_current_vocabulary(old)
    found = _parity_regressions(old, new)
    old_training, new_training = old.get("training"), new.get("training")
    if old_training and new_training and old_training["passed"] and not new_training["passed"]:
        found.append(Regression("training", "loss curve", "pass", "fail",
                                "the training curves agreed in the baseline and now diverge"))
    found += _performance_regressions(old, new, tolerance)
    old_cost, new_cost = old.get("cost") or {}, new.get("cost") or {}
    if old_cost.get("ratio") and new_cost.get("ratio"):
        change = new_cost["ratio"] / old_cost["ratio"] - 1.0
        if change < -tolerance:
            found.append(Regression("cost", "target/reference per dollar", old_cost["ratio"], new_cost["ratio"],
                                    f"target/reference work per dollar fell {-change:.0%} (allowed {tolerance:.0%})"))
    return found
