"""The JSON document of a comparison, and the JSON schema it follows (shipped in the package and
published as docs/compare-schema.json)."""

from __future__ import annotations

import json
import math
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = ["to_document", "schema", "schema_path", "write_json", "validate"]


def _clean(value: Any) -> Any:
    """JSON-safe: NaN and inf become None; tuples become lists."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(key): _clean(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(item) for item in value]
    return value


def to_document(result) -> dict[str, Any]:
    """The comparison as the document the schema describes."""
    from torchport.compare.result import SCHEMA_VERSION

    performance = {name: side.to_dict() for name, side in result.performance.items()}
    document = {
        "kind": "torchport.compare",
        "schema_version": SCHEMA_VERSION,
        "created": result.created,
        "status": result.status,
        "passed": result.passed,
        "exit_code": result.exit_code,
        "reasons": result.reasons,
        "reference": result.reference,
        "target": result.target,
        "self_comparison": result.self_comparison,
        "model": result.model,
        "seed": result.seed,
        "environment": result.environment,
        "thresholds": result.thresholds,
        "parity": result.parity.to_dict() if result.parity is not None else None,
        "training": result.training.to_dict() if result.training is not None else None,
        "performance": performance or None,
        "performance_checks": [check.to_dict() for check in result.performance_checks],
        "cost": result.cost.to_dict() if result.cost is not None else None,
        "baseline": result.baseline,
        "regressions": [regression.to_dict() for regression in result.regressions],
    }
    return _clean(document)


def schema_path() -> Path:
    """Where the schema ships inside the package."""
    return Path(str(resources.files("torchport.compare").joinpath("schema.json")))


def schema() -> dict[str, Any]:
    """The JSON schema of the document."""
    return json.loads(schema_path().read_text(encoding="utf-8"))


def validate(document: dict[str, Any]) -> None:
    """Raise jsonschema.ValidationError when `document` does not follow the schema (needs jsonschema)."""
    import jsonschema

    jsonschema.validate(document, schema())


def write_json(result, path: str | Path) -> Path:
    """Write the document to `path` atomically."""
    path = Path(path)
    from torchport.fileio import atomic_write

    atomic_write(path, json.dumps(to_document(result), indent=2) + "\n")
    return path
