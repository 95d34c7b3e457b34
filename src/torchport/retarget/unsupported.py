"""CUDA-only packages no runtime can redirect, and the device-neutral path to take instead.

The table is the static catalogue's: every import rule (rules/nonportable/*_import.py) names its
packages and, in `fix_title`, what to use instead. One source for scan, fix and run.
"""

from __future__ import annotations

import functools
import json
import os

__all__ = ["cuda_only_packages", "CudaOnlyImportError"]


@functools.lru_cache(maxsize=1)
def cuda_only_packages() -> dict[str, str]:
    """Top-level package name -> what to use instead (an imperative sentence).

    Read from the rule catalogue once, then from a cache file keyed by the catalogue's files
    (loading every rule costs more than the rest of `torchport run`'s start-up).
    """
    cache = _cache_file()
    try:
        with open(cache, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        pass
    table = _from_catalogue()
    try:
        from torchport.fileio import atomic_write

        os.makedirs(os.path.dirname(cache), exist_ok=True)
        atomic_write(cache, json.dumps(table, sort_keys=True))
    except OSError:
        pass  # a read-only home: the catalogue is read each time
    return table


def _from_catalogue() -> dict[str, str]:
    from torchport.rules import all_rules
    from torchport.rules.patterns import ImportRule

    table: dict[str, str] = {}
    for rule in all_rules():
        if issubclass(rule, ImportRule):
            for package in rule.packages:
                table[package] = rule.fix_title
    return table


def _cache_file() -> str:
    """`<cache>/retarget/cuda-only-<digest>.json`, the digest covering every rule file's path, size and mtime."""
    import hashlib

    import torchport

    rules = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "rules")
    digest = hashlib.sha256(getattr(torchport, "__version__", "").encode())
    for folder, _, files in sorted(os.walk(rules)):
        for name in sorted(files):
            if name.endswith(".py"):
                status = os.stat(os.path.join(folder, name))
                digest.update(f"{folder}/{name}:{status.st_size}:{status.st_mtime_ns};".encode())
    from torchport.fileio import default_cache_dir

    return os.path.join(default_cache_dir(), "retarget", f"cuda-only-{digest.hexdigest()[:16]}.json")


class CudaOnlyImportError(ImportError):
    """An ImportError (so `try: import flash_attn / except ImportError` fallbacks still work)."""

    def __init__(self, package: str, target: str, alternative: str):
        super().__init__(
            f"{package} is CUDA-only and is not installed for {target!r}; torchport cannot redirect it. "
            f"{alternative}.",
            name=package,
        )
