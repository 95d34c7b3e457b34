"""The Backend protocol: one subclass per device, in a file named after its torch device type."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import ClassVar

__all__ = ["Backend", "Probe", "package_installed"]


@dataclass(frozen=True)
class Probe:
    """Whether a backend can be used here, and if not, why and how to enable it."""

    usable: bool
    reason: str
    how_to_enable: str = ""


def package_installed(name: str) -> bool:
    """True when `name` can be imported, found without importing it."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _capability(name: str, doc: str, kind: type = bool) -> property:
    """A Backend property answering from the profile's `capabilities.<name>`."""
    return property(lambda self: kind(self.capability_flag(name)), doc=doc)


class Backend:
    """A device torchport can run on.

    Subclasses set the class attributes and implement `probe`. Nothing here may initialise the
    device or import a vendor package at import time: probing is lazy and never raises.
    """

    #: Registry name; equals `torch.device(...).type` unless `device_type` says otherwise.
    name: ClassVar[str]
    #: The torch device type tensors of this backend carry.
    device_type: ClassVar[str] = ""
    #: Other names users type for this backend.
    aliases: ClassVar[tuple[str, ...]] = ()
    #: The profile (torchport/profiles/<name>.yaml) holding this device's facts; default: `name`.
    profile_name: ClassVar[str] = ""
    #: A third-party backend's profile file, relative to its module's folder (or absolute); default:
    #: '<name>.yaml' next to the module. Built-in backends keep theirs in torchport/profiles.
    profile_path: ClassVar[str] = ""
    #: One line for `torchport doctor`.
    description: ClassVar[str] = ""
    #: Whether `auto` may pick it.
    auto_selectable: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if not cls.__dict__.get("device_type") and "name" in cls.__dict__:
            cls.device_type = cls.name

    # -- facts -------------------------------------------------------------------------------
    def probe(self) -> Probe:  # pragma: no cover - every backend overrides
        raise NotImplementedError

    def profile(self):
        """The target profile: the one source of this device's dtype, op, collective and
        precision facts (a third-party backend without one may set the attributes below)."""
        from torchport.profiles import load

        cached = self.__dict__.get("_profile")
        if cached is None:
            cached = self.__dict__["_profile"] = load(self.profile_name or self.name)
        return cached

    def profile_file(self) -> Path | None:
        """Where a third-party backend's profile lives (None for torchport's own backends)."""
        module = sys.modules.get(type(self).__module__)
        module_file = getattr(module, "__file__", None)
        if self.profile_path:
            path = Path(self.profile_path)
            return path if path.is_absolute() or module_file is None else Path(module_file).parent / path
        if module_file is None or type(self).__module__.startswith("torchport."):
            return None
        return Path(module_file).parent / f"{self.profile_name or self.name}.yaml"

    def capability_flag(self, name: str):
        """A capability the profile states (schema.CAPABILITIES, or 'compiler')."""
        return self.profile().capabilities[name]

    # The capability facts, each read from the profile (a subclass may still override one with a
    # plain class attribute, e.g. a third-party backend without a profile).
    supports_grad_scaler = _capability(
        "grad_scaler", "Whether torch.amp.GradScaler has kernels for this device (fp16 training keeps its scaler)."
    )
    supports_pinned_memory = _capability("pinned_memory", "Whether host memory can be pinned for transfers to it.")
    native_events = _capability("native_events", "Whether torch.Event works on it (lazy-tensor devices have none).")
    native_streams = _capability("native_streams", "Whether torch.Stream works on this device.")
    loads_to_device = _capability(
        "loads_to_device",
        "Whether torch.load(map_location=<this device>) restores storages directly; where it cannot, "
        "checkpoints load to the host and load_state_dict copies them over.",
    )
    supports_fused_optimizers = _capability(
        "fused_optimizers", "Whether torch.optim's fused=True implementations run on this device."
    )
    supports_sync_batchnorm = _capability(
        "sync_batchnorm", "Whether torch.nn.SyncBatchNorm has kernels for this device (else it is adapted)."
    )
    supports_capturable_optimizers = _capability(
        "capturable_optimizers", "Whether torch.optim's capturable=True (CUDA graph capture of the step) runs on it."
    )
    profiler_activity = _capability(
        "profiler_activity", "The torch.profiler.ProfilerActivity name of this device's kernels, or None when "
        "torch.profiler has no activity for it.", lambda value: value
    )
    sdpa_backends = _capability(
        "sdpa_backends", "The scaled_dot_product_attention kernels (SDPBackend names) this device has.", tuple
    )
    compiler = _capability("compiler", "The torch.compile backend for this target ('inductor', 'openxla', ...).", str)

    #: The `init_method` this device's process groups need where the application gives none (torch's
    #: default is `env://`); None: torch's default serves.
    dist_init_method: str | None = None

    @property
    def dist_backend(self) -> str:
        """The torch.distributed backend for this device."""
        return self.profile().collective_backends[0]

    @property
    def preferred_precision(self) -> str:
        """Reduced precision the hardware prefers for autocast ("bfloat16", "float16", "float32"):
        the profile's, unless its `preferred_precision_requires` rule fails on this host."""
        profile = self.profile()
        rule = profile.data.get("preferred_precision_requires")
        if rule:
            from torchport.backends.cpu import cpu_flags

            if not set(rule["host_cpu_flags_any"]) & cpu_flags():
                return rule["otherwise"]
        return profile.preferred_precision

    def is_out_of_memory(self, error: BaseException) -> bool:
        """Whether `error` says this device (or the host) ran out of memory.

        torch.OutOfMemoryError and Python's MemoryError mean that on any device; beyond them the
        profile's `out_of_memory` states what this device raises: `types` (exception classes by
        qualified name, e.g. 'torch.OutOfMemoryError', matched along the class's bases) and
        `messages` (phrases its runtime writes, e.g. 'RESOURCE_EXHAUSTED', matched case-insensitively).
        A backend without a profile recognises the two typed errors only.
        """
        names = {f"{cls.__module__}.{cls.__qualname__}" for cls in type(error).__mro__}
        names |= {cls.__qualname__ for cls in type(error).__mro__ if cls.__module__ == "builtins"}
        if names & {"torch.OutOfMemoryError", "MemoryError"}:
            return True
        try:
            facts = self.profile().data.get("out_of_memory") or {}
        except Exception:  # a third-party backend without a profile
            return False
        if names & set(facts.get("types", ())):
            return True
        message = str(error).lower()
        return any(phrase.lower() in message for phrase in facts.get("messages", ()))

    def is_accelerator(self) -> bool:
        """False only for the host CPU."""
        return self.device_type != "cpu"

    def device_module(self) -> ModuleType:
        """The `torch.<device>` module (torch.cuda, torch.xpu, torch.cpu, ...)."""
        import torch

        return torch.get_device_module(self.device_type)

    def device_count(self) -> int:
        try:
            return int(self.device_module().device_count())
        except Exception:
            return 0

    def device(self, index: int | None = None):
        """The torch.device for ordinal `index` (None: the current one)."""
        import torch

        if index is None or not self.is_accelerator():
            return torch.device(self.device_type)
        count = self.device_count()
        if count and index >= count:
            index = index % count
        return torch.device(self.device_type, index)

    def generator_device(self, device):
        """The device a `torch.Generator` for `device` lives on (the device itself, where it has generators)."""
        return device

    def device_name(self, index: int = 0) -> str:
        try:
            return str(self.device_module().get_device_name(index))
        except Exception:
            return self.description or self.name

    def bf16_supported(self) -> bool:
        return self.preferred_precision == "bfloat16"

    def capability(self) -> tuple[int, int]:
        """A CUDA-style compute capability that gates the features this device really has.

        Code written for CUDA checks `>= (8, 0)` before using bf16 and fused attention; answer
        (8, 0) where those work, (7, 0) otherwise.
        """
        return (8, 0) if self.bf16_supported() else (7, 0)

    def total_memory(self, index: int = 0) -> int:
        try:
            return int(self.device_module().get_device_properties(index).total_memory)
        except Exception:
            return 0

    def free_memory(self, index: int | None = None, total: int | None = None) -> int:
        """Bytes free on the device (`mem_get_info`'s first value): its size less what its allocator
        holds."""
        total = self.total_memory(index or 0) if total is None else total
        return max(total - self.memory_stat("memory_reserved", index), 0)

    def synchronize(self, index: int | None = None) -> None:
        module = self.device_module()
        if index is None:
            module.synchronize()
        else:
            module.synchronize(index)

    def memory_stat(self, stat: str, index: int | None = None) -> int:
        """Device memory statistics (`memory_allocated`, `max_memory_allocated`, ...) in bytes."""
        import torch

        if not self.is_accelerator():
            return 0
        function = getattr(torch.accelerator, stat, None)
        if function is None:
            return 0
        try:
            return int(function(index) if index is not None else function())
        except Exception:
            return 0

    def current_index(self) -> int:
        """The index of the current device of this backend."""
        import torch

        return torch.accelerator.current_device_index()

    def set_current_index(self, index: int) -> None:
        """Make device `index` of this backend the current one."""
        import torch

        torch.accelerator.set_device_index(index)

    def compile_backend(self) -> str:
        """The torch.compile backend an application's `torch.compile(model)` runs with here: the
        profile's compiler."""
        return self.compiler

    def before_compile(self) -> None:
        """Called before the application's `torch.compile` (Dynamo is being imported anyway)."""

    def memory_stats(self, index: int | None = None) -> dict:
        """The statistics the target's allocator keeps, under `torch.cuda.memory_stats` names
        (`allocated_bytes.all.current`, ...); a key the target does not keep is absent."""
        import torch

        if self.is_accelerator() and hasattr(torch.accelerator, "memory_stats"):
            try:
                stats = dict(torch.accelerator.memory_stats(index) if index is not None else torch.accelerator.memory_stats())
            except Exception:
                stats = {}
            if stats:
                return stats
        return {
            f"{kind}.all.{metric}": self.memory_stat(stat, index)
            for kind, prefix in (("allocated_bytes", "memory_allocated"), ("reserved_bytes", "memory_reserved"))
            for metric, stat in (("current", prefix), ("peak", f"max_{prefix}"))
        } if self.is_accelerator() else {}

    def reset_peak_memory_stats(self, index: int | None = None) -> None:
        import torch

        if self.is_accelerator():
            torch.accelerator.reset_peak_memory_stats(index)

    def on_activate(self) -> list[str]:
        """Process-wide setup when this backend becomes the target; returns notes for the report."""
        return []

    def __repr__(self) -> str:
        return f"<Backend {self.name}>"
