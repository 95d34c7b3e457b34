"""CUDA-only packages no runtime can redirect, and the device-neutral path to take instead.

The table is the static catalogue's: every import rule (rules/nonportable/*_import.py) names its
packages and, in `fix_title`, what to use instead. One source for scan, fix and run.
"""

from __future__ import annotations

import functools

__all__ = ["cuda_only_packages", "CudaOnlyImportError"]


@functools.lru_cache(maxsize=1)
def cuda_only_packages() -> dict[str, str]:
    """Top-level package name -> what to use instead (an imperative sentence)."""
    from torchport.rules import all_rules
    from torchport.rules.patterns import ImportRule

    table: dict[str, str] = {}
    for rule in all_rules():
        if issubclass(rule, ImportRule):
            for package in rule.packages:
                table[package] = rule.fix_title
    return table


class CudaOnlyImportError(ImportError):
    """An ImportError (so `try: import flash_attn / except ImportError` fallbacks still work)."""

    def __init__(self, package: str, target: str, alternative: str):
        super().__init__(
            f"{package} is CUDA-only and is not installed for {target!r}; torchport cannot redirect it. "
            f"{alternative}.",
            name=package,
        )
