"""Scan files in parallel, with a content-hash cache.

Every file is analysed with ALL rules once, and the per-file result is cached under the hash of
its content (plus the hash of the rule catalogue's own source), so a re-scan of an unchanged tree
only reads and hashes files. `--select`, `--ignore` and `--target` filter afterwards.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from torchport import __version__
from torchport.display import excerpt
from torchport.fileio import default_cache_dir
from torchport.rules.base import Finding
from torchport.rules.engine import FileResult, analyze
from torchport.rules.registry import all_rules
from torchport.scan.files import discover

__all__ = ["ScanResult", "scan_paths", "default_cache_dir", "DEFAULT_MAX_FILE_BYTES", "ruleset_fingerprint"]

#: Files larger than this are reported as not parsed (generated code, data dumps).
DEFAULT_MAX_FILE_BYTES = 5 * 1024 * 1024
#: Bumped when the shape of a cache entry changes, so entries of an older shape are not read.
_CACHE_FORMAT = 3
#: Below this many files to analyse, a process pool costs more than it saves.
_POOL_THRESHOLD = 48


@dataclass
class ScanResult:
    """Everything a report needs."""

    findings: list[Finding] = field(default_factory=list)
    not_parsed: dict[str, str] = field(default_factory=dict)
    files: int = 0
    lines: int = 0
    cached_files: int = 0


@lru_cache(maxsize=1)
def ruleset_fingerprint() -> str:
    """A hash of the rule catalogue's source: any change to a rule invalidates the cache."""
    digest = hashlib.blake2b(f"{__version__}:{_CACHE_FORMAT}".encode(), digest_size=12)
    root = Path(__file__).resolve().parent.parent / "rules"
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


@lru_cache(maxsize=1)
def _all_codes() -> tuple[str, ...]:
    return tuple(rule.code for rule in all_rules())


def _analyze_path(task: tuple[str, str, int]) -> tuple[str, dict]:
    path, kind, max_bytes = task
    try:
        source = Path(path).read_bytes()
    except OSError as error:
        return path, {"e": f"cannot read: {error.strerror or error}", "f": [], "n": 0}
    return path, _result_entry(_analyze_bytes(source, path, kind, max_bytes))


def _too_large(size: int, max_bytes: int) -> str:
    return (
        f"{size / 1e6:.1f} MB is over the {max_bytes / 1e6:.1f} MB limit for a source file "
        "(likely generated); raise max-file-size in [tool.torchport] to scan it"
    )


def _analyze_bytes(source: bytes, path: str, kind: str, max_bytes: int) -> FileResult:
    if len(source) > max_bytes:
        return FileResult(path, error=_too_large(len(source), max_bytes))
    nul = source.find(b"\x00")
    if nul >= 0:
        return FileResult(
            path,
            error=f"contains a NUL byte at offset {nul}: not a text source file (binary or corrupted); "
            "exclude it or restore the file",
            lines=source.count(b"\n"),
        )
    try:
        return analyze(source, path, kind, _all_codes())
    except Exception as error:  # a rule bug must not stop the scan of the rest of the tree
        return FileResult(path, error=f"internal error while analysing: {type(error).__name__}: {error}")


def _result_entry(result: FileResult) -> dict:
    findings = []
    for finding in result.findings:
        data = finding.to_dict()
        del data["path"]
        # A bounded excerpt: thousands of findings on one long line must not repeat the line each.
        data["source_line"] = excerpt(data.get("source_line") or "", finding.column)
        findings.append(data)
    return {"e": result.error, "f": findings, "n": result.lines}


_FINDING_FIELDS = {"line": int, "column": int, "end_line": int, "end_column": int, "message": str, "source_line": str}


def _valid_entry(entry) -> bool:
    """A cache entry of the shape _result_entry writes; anything else (a file edited by hand, an
    older torchport) is treated as absent and the file is analysed again."""
    if not isinstance(entry, dict) or not isinstance(entry.get("n"), int) or not isinstance(entry.get("f"), list):
        return False
    if entry.get("e") is not None and not isinstance(entry["e"], str):
        return False
    codes = set(_all_codes())
    for item in entry["f"]:
        if not isinstance(item, dict) or item.get("code") not in codes:
            return False
        if not all(isinstance(item.get(key), kind) for key, kind in _FINDING_FIELDS.items()):
            return False
        fix = item.get("fix")
        if fix is not None and not (isinstance(fix, dict) and fix.get("safety") in {"safe", "unsafe"}):
            return False
    return True


class _Cache:
    """A JSON file of per-content results, keyed by content hash and file kind."""

    def __init__(self, directory: Path | None):
        self.path = directory / f"scan-{ruleset_fingerprint()}.json" if directory else None
        self.entries: dict[str, dict] = {}
        self.dirty = False
        if self.path and self.path.is_file():
            try:
                entries = json.loads(self.path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                entries = {}
            # A cache file edited or truncated by hand is an empty cache, not an internal error.
            self.entries = entries if isinstance(entries, dict) else {}

    def save(self) -> None:
        if not self.path or not self.dirty:
            return
        from torchport.fileio import atomic_write

        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(self.path, json.dumps(self.entries, separators=(",", ":")))
        except OSError:
            pass  # the cache is an optimisation: failing to write it must not fail the scan


def _progress(total: int, enabled: bool):
    if not enabled or total < 200 or not sys.stderr.isatty():
        return None
    from rich.progress import Progress

    progress = Progress(transient=True)
    progress.start()
    task = progress.add_task("scanning", total=total)
    return progress, task


def scan_paths(
    paths: list[str],
    exclude: tuple[str, ...] = (),
    jobs: int | None = None,
    cache_dir: Path | None = None,
    use_cache: bool = True,
    progress: bool = True,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
) -> ScanResult:
    """Analyse every scannable file under `paths` with every rule; filter the result later."""
    discovery = discover(paths, exclude)
    result = ScanResult(not_parsed=dict(discovery.problems))
    cache = _Cache((cache_dir or default_cache_dir()) if use_cache else None)
    entries: dict[str, dict] = {}
    misses: list[tuple[str, str, int]] = []
    keys: dict[str, str] = {}
    for path, kind in discovery.files:
        try:
            size = os.path.getsize(path)
            if size > max_file_bytes:  # not read at all: it could be gigabytes
                result.not_parsed[path] = _too_large(size, max_file_bytes)
                continue
            source = Path(path).read_bytes()
        except OSError as error:
            result.not_parsed[path] = f"cannot read: {error.strerror or error}"
            continue
        key = kind + ":" + hashlib.blake2b(source, digest_size=16).hexdigest()
        keys[path] = key
        cached = cache.entries.get(key) if cache.path else None
        if cached is not None and _valid_entry(cached):
            entries[path] = cached
            result.cached_files += 1
        else:
            misses.append((path, kind, max_file_bytes))
    for path, entry in _run(misses, jobs, progress):
        entries[path] = entry
        if cache.path:
            cache.entries[keys[path]] = entry
            cache.dirty = True
    cache.save()
    for path, _kind in discovery.files:
        entry = entries.get(path)
        if entry is None:
            continue
        result.files += 1
        result.lines += entry["n"]
        if entry["e"]:
            result.not_parsed[path] = entry["e"]
        result.findings.extend(Finding.from_dict({**data, "path": path}) for data in entry["f"])
    return result


def _run(tasks: list[tuple[str, str, int]], jobs: int | None, progress: bool):
    jobs = jobs or os.cpu_count() or 1
    bar = _progress(len(tasks), progress)
    try:
        if jobs <= 1 or len(tasks) < _POOL_THRESHOLD:
            for task in tasks:
                yield _analyze_path(task)
                if bar:
                    bar[0].advance(bar[1])
            return
        methods = multiprocessing.get_all_start_methods()
        context = multiprocessing.get_context("fork" if "fork" in methods else None)
        tasks = sorted(tasks, key=lambda task: -_size(task[0]))
        chunk = max(1, min(32, len(tasks) // (jobs * 8)))
        with context.Pool(jobs) as pool:
            for item in pool.imap_unordered(_analyze_path, tasks, chunksize=chunk):
                yield item
                if bar:
                    bar[0].advance(bar[1])
    finally:
        if bar:
            bar[0].stop()


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
