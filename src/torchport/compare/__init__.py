"""Compare one model on two devices: numeric parity layer by layer, training curves, speed, memory
and cost per unit of work.

    from torchport.compare import compare
    result = compare(make_model, make_inputs, reference="cpu", target="cpu:bf16")
    print(result.status, result.parity.first_divergence)

Names load on first use so that `import torchport.compare` stays cheap. The package itself is
callable, `torchport.compare(...)` being `torchport.compare.compare(...)`: Python binds the
subpackage to the attribute `torchport.compare` once it is imported, so a plain function of that
name could not survive next to it.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

__all__ = [
    "compare",
    "CompareResult",
    "DeviceSpec",
    "parse_device",
    "current_side",
    "Thresholds",
    "DEFAULT_THRESHOLDS",
    "TrainingTolerance",
    "Unit",
    "load_prices",
    "tensor_metrics",
    "write_json",
    "write_markdown",
    "write_html",
]

_LOCATIONS = {
    "compare": "torchport.compare.api",
    "CompareResult": "torchport.compare.result",
    "DeviceSpec": "torchport.compare.devices",
    "parse_device": "torchport.compare.devices",
    "current_side": "torchport.compare.devices",
    "Thresholds": "torchport.compare.metrics",
    "DEFAULT_THRESHOLDS": "torchport.compare.metrics",
    "tensor_metrics": "torchport.compare.metrics",
    "TrainingTolerance": "torchport.compare.training",
    "Unit": "torchport.compare.cost",
    "load_prices": "torchport.compare.cost",
    "write_json": "torchport.compare.reports.json_report",
    "write_markdown": "torchport.compare.reports.markdown",
    "write_html": "torchport.compare.reports.html",
}


def __getattr__(name: str) -> Any:
    module_name = _LOCATIONS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'torchport.compare' has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


class _CallableModule(types.ModuleType):
    """This package's module type: calling it runs `compare`."""

    def __call__(self, *args: Any, **kwargs: Any):
        """Run `torchport.compare.compare(*args, **kwargs)`."""
        return __getattr__("compare")(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
