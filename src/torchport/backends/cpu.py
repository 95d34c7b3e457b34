"""The host CPU: always usable; bf16 autocast pays off where the CPU has AVX512-BF16 or AMX."""

from __future__ import annotations

import functools
import os
import platform

from torchport.backends import register
from torchport.backends.base import Backend, Probe


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """CPU feature flags from /proc/cpuinfo (empty where the file does not exist)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


@functools.lru_cache(maxsize=1)
def cpu_model_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def has_native_bf16() -> bool:
    """Whether the host computes bf16 natively: the flags cpu.yaml's `preferred_precision_requires`
    names (AVX512-BF16 or AMX on x86, the bf16 extension on aarch64)."""
    from torchport import backends

    return backends.get("cpu").preferred_precision == "bfloat16"


@register
class CPUBackend(Backend):
    name = "cpu"
    aliases = ("host",)
    auto_selectable = True
    description = "the host CPU"

    def probe(self) -> Probe:
        return Probe(True, "always available")

    def device_count(self) -> int:
        return 1

    def device_name(self, index: int = 0) -> str:
        return cpu_model_name()

    def bf16_supported(self) -> bool:
        return True

    def capability(self) -> tuple[int, int]:
        # The host runs every dtype; what matters to CUDA-style checks is whether bf16 is fast.
        return (8, 0) if has_native_bf16() else (7, 0)

    def total_memory(self, index: int = 0) -> int:
        try:
            return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            return 0

    def free_memory(self, index: int | None = None, total: int | None = None) -> int:
        """The memory the host can still give (MemAvailable: free pages plus reclaimable cache), as
        a GPU's free memory drops with what the program holds."""
        try:
            with open("/proc/meminfo") as handle:
                for line in handle:
                    if line.startswith("MemAvailable:"):
                        return int(line.split()[1]) * 1024
        except (OSError, ValueError, IndexError):
            pass
        try:
            return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            return self.total_memory() if total is None else total

    def synchronize(self, index: int | None = None) -> None:
        return None
