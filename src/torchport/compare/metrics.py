"""Numeric parity metrics between a reference tensor and a target tensor, and the pass rule.

The metrics are those of the best tool in the field (Ascend msprobe): cosine similarity, Euclidean
distance, max absolute error, max relative error, RMSE, share of elements within 0.1% and 0.5%
relative error; NaN or inf on one side only; dtype and shape mismatch.

Pass rule, per dtype (overridable): cosine >= `cosine_min` and max absolute error <=
`max_abs` * max(1, max |reference|). For values of magnitude <= 1 this is msprobe's absolute rule
(cosine > 0.99, max abs < 0.001 for fp32); for larger values (logits, unnormalised sums) the limit
scales with the magnitude, so the rule judges precision rather than units. A pair that is rounding
noise about 0 (reference values and differences within a thousandth of `max_abs`) is judged by the
max abs rule alone: its direction means nothing.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Iterable, Mapping

from torchport.errors import UsageError

__all__ = [
    "Thresholds",
    "DEFAULT_THRESHOLDS",
    "TensorMetrics",
    "threshold_for",
    "merge_thresholds",
    "parse_threshold_overrides",
    "tensor_metrics",
    "worst",
    "precision_rank",
    "judge",
    "Workspace",
]


@dataclass(frozen=True)
class Thresholds:
    """Limits a tensor pair must meet to agree."""

    cosine_min: float
    max_abs: float

    def to_dict(self) -> dict[str, float]:
        """The limits as plain data."""
        return asdict(self)


#: Default limits by the lowest-precision dtype involved. fp32 is msprobe's rule.
DEFAULT_THRESHOLDS: dict[str, Thresholds] = {
    "float64": Thresholds(cosine_min=0.999999, max_abs=1e-9),
    "float32": Thresholds(cosine_min=0.99, max_abs=1e-3),
    "bfloat16": Thresholds(cosine_min=0.99, max_abs=0.125),
    "float16": Thresholds(cosine_min=0.99, max_abs=0.02),
}

# Fewer mantissa bits first: the comparison is judged by the least precise side.
_PRECISION_ORDER = ("bfloat16", "float16", "float32", "float64")


def precision_rank(dtype_name: str) -> int:
    """Position of a floating dtype from least (0) to most precise; non-float dtypes rank as float32."""
    name = dtype_name.replace("torch.", "")
    if name in _PRECISION_ORDER:
        return _PRECISION_ORDER.index(name)
    if name.startswith("float8"):
        return -1
    return _PRECISION_ORDER.index("float32")


def threshold_for(dtype_names: Iterable[str], table: Mapping[str, Thresholds] | None = None) -> tuple[str, Thresholds]:
    """The (dtype, limits) that judge a comparison: those of the least precise dtype named."""
    table = table or DEFAULT_THRESHOLDS
    names = [name.replace("torch.", "") for name in dtype_names]
    floats = [name for name in names if name in _PRECISION_ORDER]
    chosen = min(floats, key=precision_rank) if floats else "float32"
    return chosen, table.get(chosen, table.get("float32", DEFAULT_THRESHOLDS["float32"]))


def merge_thresholds(overrides: Mapping[str, Mapping[str, float]] | None) -> dict[str, Thresholds]:
    """The default table with `overrides` ({'float32': {'max_abs': 1e-4}}) applied."""
    table = dict(DEFAULT_THRESHOLDS)
    for dtype_name, values in (overrides or {}).items():
        key = dtype_name.replace("torch.", "")
        aliases = {"fp32": "float32", "fp64": "float64", "bf16": "bfloat16", "fp16": "float16"}
        key = aliases.get(key, key)
        if key not in table:
            raise UsageError(
                f"Threshold override for unknown dtype {dtype_name!r}. Allowed: {', '.join(sorted(table))}. "
                "Write it as DTYPE.LIMIT=VALUE, e.g. float32.max_abs=1e-4."
            )
        unknown = set(values) - {"cosine_min", "max_abs"}
        if unknown:
            raise UsageError(
                f"Unknown threshold {sorted(unknown)!r} for {key}. Allowed: cosine_min, max_abs. "
                "Write it as DTYPE.LIMIT=VALUE, e.g. bfloat16.cosine_min=0.995."
            )
        table[key] = replace(table[key], **{name: float(value) for name, value in values.items()})
    return table


def parse_threshold_overrides(items: Iterable[str]) -> dict[str, dict[str, float]]:
    """`['float32.max_abs=1e-4', 'bf16.cosine_min=0.995']` to the mapping `merge_thresholds` takes."""
    overrides: dict[str, dict[str, float]] = {}
    for item in items:
        key, equals, value = item.partition("=")
        dtype_name, dot, limit = key.partition(".")
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not equals or not dot or math.isnan(number):
            raise UsageError(
                f"Threshold {item!r} is not DTYPE.LIMIT=NUMBER. Example: float32.max_abs=1e-4 "
                "(limits: cosine_min, max_abs; dtypes: float64, float32, bfloat16, float16)."
            )
        overrides.setdefault(dtype_name.strip(), {})[limit.strip()] = number
    return overrides


@dataclass
class TensorMetrics:
    """How one target tensor differs from its reference."""

    shape_reference: list[int]
    shape_target: list[int]
    dtype_reference: str
    dtype_target: str
    cosine: float | None = None
    euclidean: float | None = None
    max_abs: float | None = None
    max_rel: float | None = None
    rmse: float | None = None
    within_0_1_percent: float | None = None
    within_0_5_percent: float | None = None
    reference_max_abs_value: float | None = None
    nan_one_sided: int = 0
    inf_one_sided: int = 0
    issues: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The metrics as plain data (NaN and inf written as None)."""
        data = asdict(self)
        for key, value in data.items():
            if isinstance(value, float) and not math.isfinite(value):
                data[key] = None
        return data


class Workspace:
    """Reusable scratch buffers for `tensor_metrics`.

    Large fresh tensors cost page faults on every allocation; one comparison run reuses a few
    buffers sized to its largest tensor instead.
    """

    def __init__(self) -> None:
        self._buffers: dict[tuple[str, Any], Any] = {}

    def get(self, name: str, numel: int, dtype):
        """A 1-D tensor of `numel` elements of `dtype` (contents undefined)."""
        import torch

        key = (name, dtype)
        buffer = self._buffers.get(key)
        if buffer is None or buffer.numel() < numel:
            buffer = torch.empty(numel, dtype=dtype)
            self._buffers[key] = buffer
        return buffer[:numel]


def tensor_metrics(reference, target, dtype_allowed: str | None = None, workspace: Workspace | None = None) -> TensorMetrics:
    """The metrics for one pair of CPU tensors.

    `dtype_allowed` names a target dtype a precision policy explains (e.g. 'bfloat16' under a bf16
    autocast policy, 'float32' under an fp32 policy); any other dtype difference is an issue.
    """
    import torch

    metrics = TensorMetrics(
        shape_reference=list(reference.shape),
        shape_target=list(target.shape),
        dtype_reference=str(reference.dtype).replace("torch.", ""),
        dtype_target=str(target.dtype).replace("torch.", ""),
    )
    if metrics.dtype_reference != metrics.dtype_target and metrics.dtype_target != dtype_allowed:
        metrics.issues.append(f"dtype mismatch: {metrics.dtype_reference} vs {metrics.dtype_target}")
    if reference.shape != target.shape:
        metrics.issues.append(f"shape mismatch: {metrics.shape_reference} vs {metrics.shape_target}")
        return metrics
    if reference.is_complex() or target.is_complex():
        reference = torch.view_as_real(reference.resolve_conj()) if reference.is_complex() else reference
        target = torch.view_as_real(target.resolve_conj()) if target.is_complex() else target
        if reference.shape != target.shape:
            metrics.issues.append("complex on one side only")
            return metrics
    if reference.numel() == 0 or (reference.dtype == target.dtype and torch.equal(reference, target)):
        return _identical(metrics, reference)
    workspace = workspace or Workspace()
    # float32 arithmetic for float32 and narrower (exact enough to judge them, half the memory
    # traffic of float64); float64 when a side is float64 or not floating point.
    narrow = all(tensor.is_floating_point() and tensor.dtype != torch.float64 for tensor in (reference, target))
    work_dtype = torch.float32 if narrow else torch.float64
    count = reference.numel()

    def as_work(tensor, name):
        flat = tensor.detach().reshape(-1)
        if flat.dtype == work_dtype:
            return flat
        return workspace.get(name, count, work_dtype).copy_(flat)

    expected, actual = as_work(reference, "expected"), as_work(target, "actual")
    # Norms are finite exactly when every element is, so the NaN/inf masks run only when needed.
    norm_expected = float(torch.linalg.vector_norm(expected))
    norm_actual = float(torch.linalg.vector_norm(actual))
    if not (math.isfinite(norm_expected) and math.isfinite(norm_actual)):
        finite_expected, finite_actual = torch.isfinite(expected), torch.isfinite(actual)
        metrics.nan_one_sided = int((torch.isnan(expected) ^ torch.isnan(actual)).sum())
        metrics.inf_one_sided = int((torch.isinf(expected) ^ torch.isinf(actual)).sum())
        if metrics.nan_one_sided:
            metrics.issues.append(f"NaN on one side only in {metrics.nan_one_sided} elements")
        if metrics.inf_one_sided:
            metrics.issues.append(f"inf on one side only in {metrics.inf_one_sided} elements")
        finite = finite_expected & finite_actual
        expected, actual = expected[finite].to(torch.float64), actual[finite].to(torch.float64)
        count = expected.numel()
        if count == 0:
            return metrics
        norm_expected = float(torch.linalg.vector_norm(expected))
        norm_actual = float(torch.linalg.vector_norm(actual))
        work_dtype = torch.float64
    difference = torch.sub(actual, expected, out=workspace.get("difference", count, work_dtype)).abs_()
    metrics.euclidean = float(torch.linalg.vector_norm(difference))
    metrics.rmse = metrics.euclidean / math.sqrt(count)
    if norm_expected == 0.0 and norm_actual == 0.0:
        metrics.cosine = 1.0
    elif norm_expected == 0.0 or norm_actual == 0.0:
        metrics.cosine = 0.0
    else:
        # a.b = (|a|^2 + |b|^2 - |a-b|^2) / 2: the cosine from three norms, with no product tensor.
        dot = (norm_expected ** 2 + norm_actual ** 2 - metrics.euclidean ** 2) / 2.0
        metrics.cosine = max(-1.0, min(1.0, dot / (norm_expected * norm_actual)))
    metrics.max_abs = float(difference.amax())
    magnitude = torch.abs(expected, out=workspace.get("magnitude", count, work_dtype))
    metrics.reference_max_abs_value = float(magnitude.amax())
    # Relative error in place of the difference; where the difference is zero, 0 / tiny is 0.
    relative = difference.div_(magnitude.clamp_min_(torch.finfo(work_dtype).tiny))
    metrics.max_rel = float(relative.amax())
    flags = workspace.get("flags", count, torch.bool)
    metrics.within_0_1_percent = int(torch.count_nonzero(torch.le(relative, 1e-3, out=flags))) / count
    metrics.within_0_5_percent = int(torch.count_nonzero(torch.le(relative, 5e-3, out=flags))) / count
    return metrics


def _identical(metrics: TensorMetrics, reference) -> TensorMetrics:
    """Metrics of a pair that is bit-for-bit equal."""
    import torch

    metrics.cosine, metrics.max_abs, metrics.max_rel, metrics.rmse, metrics.euclidean = 1.0, 0.0, 0.0, 0.0, 0.0
    metrics.within_0_1_percent = metrics.within_0_5_percent = 1.0
    if reference.numel() == 0 or reference.dtype == torch.bool:
        metrics.reference_max_abs_value = float(bool(reference.any())) if reference.numel() else 0.0
    else:
        metrics.reference_max_abs_value = float(reference.detach().abs().max())
    return metrics


def judge(metrics: TensorMetrics, limits: Thresholds) -> list[str]:
    """The reasons `metrics` fail `limits` (empty when they pass), on top of its own issues."""
    reasons = list(metrics.issues)
    if metrics.cosine is not None and metrics.cosine < limits.cosine_min and not _near_zero(metrics, limits):
        reasons.append("cosine {} < {}".format(*_apart(metrics.cosine, limits.cosine_min, 6)))
    if metrics.max_abs is not None:
        allowed = limits.max_abs * max(1.0, metrics.reference_max_abs_value or 0.0)
        if metrics.max_abs > allowed:
            reasons.append("max abs error {} > {}".format(*_apart(metrics.max_abs, allowed, 3)))
    return reasons


def _apart(value: float, limit: float, digits: int) -> tuple[str, str]:
    """`value` and `limit` written with `digits` significant digits, or as many more as it takes for
    them to read differently (an error of 0.001291 against a limit of 0.00129 is not "0.00129 > 0.00129")."""
    for places in range(digits, 18):
        shown = f"{value:.{places}g}", f"{limit:.{places}g}"
        if shown[0] != shown[1]:
            return shown
    return shown


#: The share of the absolute limit below which values are rounding noise: a pair whose reference and
#: difference both stay under it is judged by the max abs rule alone (1e-6 for float32).
NOISE_FLOOR_SHARE = 1e-3


def _near_zero(metrics: TensorMetrics, limits: Thresholds) -> bool:
    """Whether the pair is rounding noise about 0: every reference value and every difference within a
    thousandth of the absolute limit (1e-6 for float32). The direction of such values means nothing (a
    score summed in another order, 7e-9 against 0, has cosine 0; 3e-9 against -2e-9, cosine -1); values
    above the floor (gradients, small activations, embeddings) keep the cosine rule."""
    floor = limits.max_abs * NOISE_FLOOR_SHARE
    return (metrics.reference_max_abs_value is not None and metrics.max_abs is not None
            and metrics.reference_max_abs_value <= floor and metrics.max_abs <= floor)


def worst(items: list[TensorMetrics]) -> dict[str, float | None]:
    """The worst value of each metric over several tensors (lowest cosine, highest errors)."""
    def pick(name: str, function):
        values = [getattr(item, name) for item in items if getattr(item, name) is not None]
        return function(values) if values else None

    return {
        "cosine": pick("cosine", min),
        "euclidean": pick("euclidean", max),
        "max_abs": pick("max_abs", max),
        "max_rel": pick("max_rel", max),
        "rmse": pick("rmse", max),
        "within_0_1_percent": pick("within_0_1_percent", min),
        "within_0_5_percent": pick("within_0_5_percent", min),
        "nan_one_sided": sum(item.nan_one_sided for item in items),
        "inf_one_sided": sum(item.inf_one_sided for item in items),
    }

