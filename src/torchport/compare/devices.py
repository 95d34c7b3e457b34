"""A side of a comparison: a registry backend plus an optional precision policy.

Written `BACKEND[:PRECISION]`: `cpu`, `cpu:bf16`, `neuron-emulated`, `xla`, `cuda:fp16`. The
precision policy says how the side computes:

* `native` (the default): the model runs as written.
* `fp32`: float64 parameters, buffers and inputs are downcast to float32 first, the way devices
  without fp64 (Neuron, MPS) run a model.
* `bf16` / `fp16`: autocast to that dtype on the backend's device type.
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass
from typing import Any, Iterator

from torchport.errors import UsageError

__all__ = [
    "DeviceSpec",
    "PRECISIONS",
    "parse_device",
    "current_side",
    "side",
    "move_to",
    "precision_context",
    "prepare_model",
]

#: Precision policies, with the names users may type for each.
PRECISIONS: dict[str, tuple[str, ...]] = {
    "native": ("native", "default", "none"),
    "fp32": ("fp32", "float32", "no-fp64"),
    "bf16": ("bf16", "bfloat16"),
    "fp16": ("fp16", "float16", "half"),
}

_current_side: contextvars.ContextVar[str | None] = contextvars.ContextVar("torchport_compare_side", default=None)


def current_side() -> str | None:
    """'reference' or 'target' while compare runs that side's model, else None.

    Models may read it to inject a known fault when testing a comparison pipeline.
    """
    return _current_side.get()


@contextlib.contextmanager
def side(name: str) -> Iterator[None]:
    """Mark the code inside as running the `name` side ('reference' or 'target')."""
    token = _current_side.set(name)
    try:
        yield
    finally:
        _current_side.reset(token)


def _canonical_precision(text: str) -> str:
    key = text.strip().lower()
    for name, spellings in PRECISIONS.items():
        if key in spellings:
            return name
    allowed = sorted({spelling for spellings in PRECISIONS.values() for spelling in spellings})
    raise UsageError(
        f"Unknown precision policy {text!r}. Allowed: {', '.join(allowed)}. "
        "Write the device as BACKEND[:PRECISION], e.g. 'cpu:bf16'."
    )


@dataclass(frozen=True)
class DeviceSpec:
    """One side of a comparison: which backend, which precision policy."""

    backend_name: str
    precision: str = "native"

    @property
    def label(self) -> str:
        """The spelling users read and type back: 'cpu' or 'cpu:bf16'."""
        if self.precision == "native":
            return self.backend_name
        return f"{self.backend_name}:{self.precision}"

    @property
    def backend(self):
        """The usable Backend; raises DeviceUnavailableError with the next step if it is not."""
        from torchport import backends

        return backends.resolve(self.backend_name)

    @property
    def device(self):
        """The torch.device tensors of this side live on."""
        return self.backend.device(0)

    @property
    def autocast_dtype(self):
        """The autocast dtype of the policy, or None."""
        import torch

        return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.precision)

    @property
    def compute_dtype_name(self) -> str:
        """The dtype whose thresholds judge this side ('float32', 'bfloat16', ...)."""
        return {"bf16": "bfloat16", "fp16": "float16"}.get(self.precision, "float32")

    def __str__(self) -> str:
        return self.label


def parse_device(text: str | DeviceSpec, precision: str | None = None) -> DeviceSpec:
    """`BACKEND[:PRECISION]` (or a DeviceSpec) to a DeviceSpec with a canonical backend name.

    `precision`, when given, overrides the one written after the colon. A numeric suffix
    (`cuda:1`) is refused: compare runs each side on device 0 of its backend.
    """
    from torchport import backends

    if isinstance(text, DeviceSpec):
        spec = text
        if precision is not None:
            spec = DeviceSpec(spec.backend_name, _canonical_precision(precision))
        return spec
    if not isinstance(text, str) or not text.strip():
        raise UsageError(
            f"Device {text!r} is not a device name. Write BACKEND[:PRECISION], e.g. 'cpu' or 'cpu:bf16'; "
            "run 'torchport doctor' for the backends usable here."
        )
    name, _, written_precision = text.strip().partition(":")
    if written_precision.isdigit():
        raise UsageError(
            f"Device {text!r} names a device index; compare takes BACKEND[:PRECISION] and runs on index 0. "
            f"Write {name!r}, or select the device with the backend's visibility variable."
        )
    policy = _canonical_precision(precision or written_precision or "native")
    return DeviceSpec(backends.canonical_name(name), policy)


def move_to(value: Any, device, downcast_float64: bool = False) -> Any:
    """`value` with every tensor inside (tuples, lists, dicts) moved to `device`."""
    import torch

    if isinstance(value, torch.Tensor):
        if downcast_float64 and value.dtype == torch.float64:
            value = value.to(torch.float32)
        return value.to(device)
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(move_to(item, device, downcast_float64) for item in value))
    if isinstance(value, (list, tuple)):
        return type(value)(move_to(item, device, downcast_float64) for item in value)
    if isinstance(value, dict):
        return {key: move_to(item, device, downcast_float64) for key, item in value.items()}
    return value


def prepare_model(model, spec: DeviceSpec):
    """Move `model` to the side's device, applying the precision policy to its weights."""
    import torch

    if spec.precision == "fp32":
        for module in model.modules():
            for name, parameter in list(module.named_parameters(recurse=False)):
                if parameter.dtype == torch.float64:
                    parameter.data = parameter.data.to(torch.float32)
            for name, buffer in list(module.named_buffers(recurse=False)):
                if buffer is not None and buffer.dtype == torch.float64:
                    module._buffers[name] = buffer.to(torch.float32)
    return model.to(spec.device)


@contextlib.contextmanager
def precision_context(spec: DeviceSpec) -> Iterator[None]:
    """Autocast for bf16/fp16 policies; nothing otherwise. Refuses a device without autocast."""
    import torch

    dtype = spec.autocast_dtype
    if dtype is None:
        yield
        return
    device_type = spec.device.type
    try:
        context = torch.autocast(device_type, dtype=dtype)
    except (RuntimeError, ValueError) as error:
        raise UsageError(
            f"Precision policy {spec.precision!r} needs autocast on {device_type!r}, which failed: {error}. "
            f"Compare {spec.backend_name!r} without a precision suffix, or pick a backend with autocast."
        ) from error
    with context:
        yield
