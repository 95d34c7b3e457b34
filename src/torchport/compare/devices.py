"""A side of a comparison: a registry backend plus an optional precision policy.

Written `BACKEND[:PRECISION]`: `cpu`, `cpu:bf16`, `neuron-emulated`, `xla`, `cuda:fp16`. The
precision policy, a word of torchport.precision's one vocabulary, says how the side computes:

* `keep` (the default; `native` is its synonym): the model runs as written.
* `no-fp64` (its old spellings `fp32` and `float32` are deprecated: elsewhere `fp32` means autocast off): float64 parameters, buffers and inputs are downcast to float32
  first, the way devices without fp64 (Neuron, MPS) run a model. Autocast stays off; on a model with
  no float64 tensor this policy changes nothing.
* `bf16` / `fp16`: autocast to that dtype on the backend's device type.
"""

from __future__ import annotations

import contextlib
import contextvars
import warnings
from dataclasses import dataclass
from typing import Any, Iterator

from torchport import precision as precision_vocabulary
from torchport.errors import UsageError

__all__ = [
    "DeviceSpec",
    "PRECISIONS",
    "DEFAULT_PRECISION",
    "canonical_label",
    "SideEffects",
    "track_effects",
    "parse_device",
    "current_side",
    "side",
    "move_to",
    "precision_context",
    "prepare_model",
]

#: Precision policies compare supports, with the names users may type for each (torchport.precision's
#: vocabulary; a side stores the policy word itself).
PRECISIONS: dict[str, tuple[str, ...]] = precision_vocabulary.by_policy("compare")
#: The policy of a side written without one: the model as written.
DEFAULT_PRECISION = "keep"

_current_side: contextvars.ContextVar[str | None] = contextvars.ContextVar("torchport_compare_side", default=None)


@dataclass
class SideEffects:
    """What a side's precision policy actually changed while compare ran it."""

    downcast_tensors: int = 0
    autocast: bool = False

    @property
    def changed(self) -> bool:
        """True when the side computed differently from the model as written."""
        return self.downcast_tensors > 0 or self.autocast

    def describe(self) -> str:
        """'3 tensor(s) downcast to float32, autocast on', or 'nothing changed'."""
        parts = []
        if self.downcast_tensors:
            parts.append(f"{self.downcast_tensors} float64 tensor(s) downcast to float32")
        if self.autocast:
            parts.append("autocast on")
        return ", ".join(parts) or "no tensor downcast, no autocast"

    def to_dict(self) -> dict[str, Any]:
        """The effects as plain data."""
        return {"downcast_tensors": self.downcast_tensors, "autocast": self.autocast}


_effects: contextvars.ContextVar[dict[str, SideEffects] | None] = contextvars.ContextVar(
    "torchport_compare_effects", default=None)


@contextlib.contextmanager
def track_effects() -> Iterator[dict[str, SideEffects]]:
    """Record, per side name, what prepare_model, move_to and precision_context changed inside."""
    table: dict[str, SideEffects] = {"reference": SideEffects(), "target": SideEffects()}
    token = _effects.set(table)
    try:
        yield table
    finally:
        _effects.reset(token)


def _record(side_name: str | None, downcasts: int = 0, autocast: bool = False) -> None:
    table = _effects.get()
    name = side_name or _current_side.get()
    if table is None or name is None:
        return
    entry = table.setdefault(name, SideEffects())
    entry.downcast_tensors += downcasts
    entry.autocast = entry.autocast or autocast


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
    try:
        policy = precision_vocabulary.resolve(text, "compare")
    except UsageError as error:
        raise UsageError(f"{error} Write the device as BACKEND[:PRECISION], e.g. 'cpu:bf16'.") from None
    return policy


@dataclass(frozen=True)
class DeviceSpec:
    """One side of a comparison: which backend, which precision policy."""

    backend_name: str
    precision: str = DEFAULT_PRECISION

    @property
    def label(self) -> str:
        """The spelling users read and type back: 'cpu' or 'cpu:bf16'."""
        if self.precision == DEFAULT_PRECISION:
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
    def downcasts_float64(self) -> bool:
        """True under the no-fp64 policy: float64 tensors become float32 on this side."""
        return self.precision == "no-fp64"

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
    policy = _canonical_precision(precision or written_precision or DEFAULT_PRECISION)
    return DeviceSpec(backends.canonical_name(name), policy)


def canonical_label(text: str) -> str:
    """A side's label in today's vocabulary: 'cpu:native' (older result files) -> 'cpu', 'cpu:bfloat16' -> 'cpu:bf16'.

    Only the precision word is rewritten, so a label naming a backend this machine lacks still reads;
    text that is not BACKEND[:PRECISION] comes back unchanged.
    """
    if not isinstance(text, str):
        return text
    name, colon, written = text.partition(":")
    if not colon:
        return text
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            policy = precision_vocabulary.resolve(written, "compare")
    except UsageError:
        return text
    return name if policy == DEFAULT_PRECISION else f"{name}:{policy}"


def move_to(value: Any, device, downcast_float64: bool = False, side_name: str | None = None) -> Any:
    """`value` with every tensor inside (any structure: tuples, dicts, dataclasses, ...) moved to `device`.

    Tensors downcast from float64 are counted for `side_name` (default: the current side) when
    compare tracks effects.
    """
    import torch

    from torchport.compare.tree import map_tensors

    count = [0]

    def moved(tensor):
        if downcast_float64 and tensor.dtype == torch.float64:
            tensor = tensor.to(torch.float32)
            count[0] += 1
        return tensor.to(device)

    result = map_tensors(moved, value)
    _record(side_name, downcasts=count[0])
    return result


def prepare_model(model, spec: DeviceSpec, side_name: str | None = None):
    """Move `model` to the side's device, applying the precision policy to its weights.

    Parameters and buffers downcast from float64 are counted for `side_name` (default: the
    current side) when compare tracks effects.
    """
    import torch

    downcasts = 0
    if spec.downcasts_float64:
        for module in model.modules():
            for name, parameter in list(module.named_parameters(recurse=False)):
                if parameter.dtype == torch.float64:
                    parameter.data = parameter.data.to(torch.float32)
                    downcasts += 1
            for name, buffer in list(module.named_buffers(recurse=False)):
                if buffer is not None and buffer.dtype == torch.float64:
                    module._buffers[name] = buffer.to(torch.float32)
                    downcasts += 1
    _record(side_name, downcasts=downcasts)
    return model.to(spec.device)


@contextlib.contextmanager
def precision_context(spec: DeviceSpec, side_name: str | None = None) -> Iterator[None]:
    """Autocast for bf16/fp16 policies; nothing otherwise. Refuses a device without autocast.

    Autocast is recorded for `side_name` (default: the current side) when compare tracks effects.
    """
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
    _record(side_name, autocast=True)
    with context:
        yield
