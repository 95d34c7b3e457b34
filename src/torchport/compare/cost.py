"""Cost per unit of work: an editable YAML price table turns throughput into units per dollar, and
the target/reference ratio into the sentence vendors quote ("70% more audio per dollar")."""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from torchport.errors import UsageError

__all__ = ["PriceTable", "CostResult", "Unit", "load_prices", "default_prices_path", "compute_cost"]


@dataclass(frozen=True)
class Unit:
    """The unit of work: 'samples', or e.g. 'audio_seconds' with the seconds one sample holds."""

    name: str = "samples"
    per_sample: float = 1.0

    def to_dict(self) -> dict[str, Any]:
        """The unit as plain data."""
        return {"name": self.name, "per_sample": self.per_sample}


@dataclass
class PriceTable:
    """Instances with an hourly price, and the instance each backend stands for."""

    instances: dict[str, dict[str, Any]]
    devices: dict[str, str]
    source: str
    currency: str = "USD"

    def instance_for(self, backend_name: str) -> tuple[str, float] | None:
        """(instance, price per hour) for a backend, or None when the table has none. An emulated
        twin ('neuron-emulated') stands for the instance of its real backend unless listed itself."""
        from torchport.backends import EMULATED_SUFFIX

        instance = self.devices.get(backend_name) or self.devices.get(backend_name.removesuffix(EMULATED_SUFFIX))
        if instance is None or instance not in self.instances:
            return None
        return instance, float(self.instances[instance]["price_per_hour"])


def default_prices_path() -> Path:
    """The example price table shipped with torchport."""
    return Path(str(resources.files("torchport.compare").joinpath("prices.yaml")))


#: The keys a price table may hold at the top level.
_TOP_LEVEL_KEYS = ("currency", "noted", "instances", "devices")


def _registered_backend(name: str, path: Path) -> str:
    """The registry's name for a 'devices' key (aliases allowed); a key naming no backend is an error."""
    import difflib

    from torchport import backends
    from torchport.errors import UnknownDeviceError

    try:
        return backends.canonical_name(name)
    except UnknownDeviceError:
        known = [backend.name for backend in backends.all_backends()]
        close = difflib.get_close_matches(name, backends.names(), n=1)
        hint = f"Did you mean {close[0]!r}? " if close else ""
        raise UsageError(
            f"Device {name!r} in {str(path)!r} is not a torchport backend. {hint}Known backends: {', '.join(known)}. "
            "Rename the key under 'devices' to a backend name (see 'torchport doctor')."
        ) from None


def load_prices(path: str | Path | None = None) -> PriceTable:
    """Read a price table; errors name the file, the problem and the expected layout."""
    import yaml

    path = Path(path) if path else default_prices_path()
    layout = "Expected keys 'instances' (name: {price_per_hour: NUMBER}) and 'devices' (backend: instance)."
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise UsageError(f"Cannot read price table {str(path)!r}: {error.strerror}. Pass an existing YAML file to --prices.") from error
    except yaml.YAMLError as error:
        raise UsageError(f"Price table {str(path)!r} is not valid YAML: {error}. {layout}") from error
    if not isinstance(data, dict) or not isinstance(data.get("instances"), dict) or not isinstance(data.get("devices"), dict):
        raise UsageError(f"Price table {str(path)!r} has the wrong layout. {layout}")
    unknown = sorted(set(data) - set(_TOP_LEVEL_KEYS), key=str)
    if unknown:
        import difflib

        close = difflib.get_close_matches(str(unknown[0]), _TOP_LEVEL_KEYS, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise UsageError(
            f"Price table {str(path)!r} has unknown key {unknown[0]!r}.{hint} Allowed keys: {', '.join(_TOP_LEVEL_KEYS)}."
        )
    for name, entry in data["instances"].items():
        price = entry.get("price_per_hour") if isinstance(entry, dict) else None
        if not isinstance(price, (int, float)) or price <= 0:
            raise UsageError(
                f"Instance {name!r} in {str(path)!r} has price_per_hour {price!r}; it must be a positive number. {layout}"
            )
    devices = {}
    for backend_name, instance in data["devices"].items():
        devices[_registered_backend(str(backend_name), path)] = str(instance)
        if instance not in data["instances"]:
            raise UsageError(
                f"Device {backend_name!r} in {str(path)!r} stands for instance {instance!r}, which the table does not "
                f"price. Priced instances: {sorted(data['instances'])}. Add it under 'instances'."
            )
    return PriceTable(
        instances=data["instances"],
        devices=devices,
        source=str(path),
        currency=str(data.get("currency", "USD")),
    )


@dataclass
class CostResult:
    """Units of work per dollar on each side, and their ratio."""

    unit: dict[str, Any]
    currency: str
    price_source: str
    reference_instance: str | None
    reference_price_per_hour: float | None
    target_instance: str | None
    target_price_per_hour: float | None
    reference_units_per_dollar: float | None
    target_units_per_dollar: float | None
    ratio: float | None
    summary: str
    per_batch: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The cost as plain data."""
        return dict(self.__dict__)


def _per_dollar(units_per_second: float, price_per_hour: float) -> float:
    return units_per_second * 3600.0 / price_per_hour


def compute_cost(reference_performance, target_performance, reference_backend: str, target_backend: str,
                 unit: Unit, prices: PriceTable) -> CostResult:
    """Units per dollar at each side's best batch size, per batch size, and the target/reference ratio."""
    reference_price = prices.instance_for(reference_backend)
    target_price = prices.instance_for(target_backend)
    unit_label = unit.name.replace("_", " ")
    result = CostResult(
        unit=unit.to_dict(),
        currency=prices.currency,
        price_source=prices.source,
        reference_instance=reference_price[0] if reference_price else None,
        reference_price_per_hour=reference_price[1] if reference_price else None,
        target_instance=target_price[0] if target_price else None,
        target_price_per_hour=target_price[1] if target_price else None,
        reference_units_per_dollar=None,
        target_units_per_dollar=None,
        ratio=None,
        summary="",
    )
    missing = [name for name, price in ((reference_backend, reference_price), (target_backend, target_price)) if not price]
    if missing:
        result.summary = (f"No price for {', '.join(map(repr, missing))} in {prices.source}; "
                          "add the instance it stands for under 'devices' to get cost per unit of work.")
        return result
    reference_best, target_best = reference_performance.best(), target_performance.best()
    if reference_best is None or target_best is None:
        result.summary = "No performance measurements; cost needs the performance sweep."
        return result
    result.reference_units_per_dollar = _per_dollar(reference_best.units_per_second, reference_price[1])
    result.target_units_per_dollar = _per_dollar(target_best.units_per_second, target_price[1])
    if result.reference_units_per_dollar > 0:
        result.ratio = result.target_units_per_dollar / result.reference_units_per_dollar
    for reference_batch in reference_performance.batches:
        target_batch = target_performance.at(reference_batch.batch_size)
        if target_batch is None:
            continue
        reference_value = _per_dollar(reference_batch.units_per_second, reference_price[1])
        target_value = _per_dollar(target_batch.units_per_second, target_price[1])
        result.per_batch.append({
            "batch_size": reference_batch.batch_size,
            "reference_units_per_dollar": reference_value,
            "target_units_per_dollar": target_value,
            "ratio": target_value / reference_value if reference_value > 0 else None,
        })
    if result.ratio is not None:
        change = (result.ratio - 1.0) * 100.0
        direction = "more" if change >= 0 else "less"
        result.summary = (f"{abs(change):.0f}% {direction} {unit_label} per {prices.currency} on the target "
                          f"({target_price[0]} at {target_price[1]:g}/h) than on the reference "
                          f"({reference_price[0]} at {reference_price[1]:g}/h), at each side's best batch size.")
    return result
