"""Which files a scan reads, and what kind each is.

Directories are walked without following symlinked directories into a place already visited;
a symlink loop or a dangling link is reported as a file that was not parsed, with the reason.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

__all__ = ["file_kind", "Discovery", "discover", "DEFAULT_EXCLUDES", "relative_display"]

#: Directory names never descended into (an explicitly named path is always scanned).
DEFAULT_EXCLUDES: tuple[str, ...] = (
    ".git", ".hg", ".svn", ".venv", "venv", ".tox", ".nox", "__pycache__", ".mypy_cache",
    ".pytest_cache", ".ruff_cache", "node_modules", ".eggs", "*.egg-info", ".torchport_cache",
    ".ipynb_checkpoints",  # Jupyter's autosaved copies of notebooks
)

_REQUIREMENTS = re.compile(r"(.*requirements.*|constraints.*)\.(txt|in)$", re.IGNORECASE)
_SUFFIX_KINDS = {
    ".py": "python",
    ".ipynb": "notebook",  # code cells, read by torchport.notebooks
    ".cu": "cuda",
    ".cuh": "cuda",
    ".sh": "shell",
    ".bash": "shell",
    ".zsh": "shell",
    ".slurm": "shell",
    ".sbatch": "shell",
    ".yaml": "config",
    ".yml": "config",
    ".cfg": "config",
    ".ini": "config",
    ".env": "config",
    ".conf": "config",
    ".mk": "makefile",
}


def file_kind(path: str) -> str | None:
    """'python', 'notebook', 'cuda', 'requirements', 'pyproject', 'shell', 'config', 'dockerfile',
    'makefile', or None for files no rule reads."""
    name = os.path.basename(path)
    if name == "pyproject.toml":
        return "pyproject"
    if _REQUIREMENTS.match(name):
        return "requirements"
    if name == "Dockerfile" or name.startswith("Dockerfile.") or name.endswith(".dockerfile"):
        return "dockerfile"
    if name in {"Makefile", "GNUmakefile", "makefile"}:
        return "makefile"
    return _SUFFIX_KINDS.get(os.path.splitext(name)[1].lower())


@dataclass
class Discovery:
    """Files found under the scan roots, and paths that could not be read, with reasons."""

    files: list[tuple[str, str]] = field(default_factory=list)
    problems: dict[str, str] = field(default_factory=dict)


@lru_cache(maxsize=16)
def _exclusion(patterns: tuple[str, ...]) -> re.Pattern[str]:
    """One regular expression for all glob `patterns` (what fnmatch would match, at once)."""
    return re.compile("|".join(fnmatch.translate(os.path.normcase(pattern)) for pattern in patterns) or "(?!)")


def _excluded(name: str, relative: str, patterns: tuple[str, ...]) -> bool:
    match = _exclusion(patterns).match
    return match(os.path.normcase(name)) is not None or match(os.path.normcase(relative)) is not None


def discover(paths: list[str], exclude: tuple[str, ...] = ()) -> Discovery:
    """Walk `paths` (files or directories) and list the files a rule reads.

    `exclude` holds glob patterns matched against names and root-relative paths, on top of
    DEFAULT_EXCLUDES. Missing paths must be checked by the caller (they are a usage error).
    """
    found = Discovery()
    patterns = DEFAULT_EXCLUDES + tuple(exclude)
    seen_files: set[str] = set()
    for root in paths:
        if os.path.isfile(root):
            kind = file_kind(root)
            if kind is not None and root not in seen_files:
                seen_files.add(root)
                found.files.append((root, kind))
            continue
        _walk(root, patterns, found, seen_files)
    return found


def _walk(root: str, patterns: tuple[str, ...], found: Discovery, seen_files: set[str]) -> None:
    visited: set[str] = set()
    stack: list[tuple[str, str]] = [(root, "")]
    while stack:
        directory, prefix = stack.pop()
        real = os.path.realpath(directory)
        if real in visited:
            found.problems[directory] = f"symlink loop: resolves to {real!r}, which is already being scanned"
            continue
        visited.add(real)
        try:
            entries = sorted(os.scandir(directory), key=lambda entry: entry.name)
        except OSError as error:
            found.problems[directory] = f"cannot list directory: {error.strerror or error}"
            continue
        subdirectories = []
        for entry in entries:
            relative = prefix + entry.name  # the same as os.path.relpath(entry.path, root)
            if _excluded(entry.name, relative, patterns):
                continue
            try:
                is_directory = entry.is_dir()
                is_file = entry.is_file()
            except OSError as error:
                reason = _broken_link_reason(entry.path) if entry.is_symlink() else None
                found.problems[entry.path] = reason or f"cannot stat: {error.strerror or error}"
                continue
            if entry.is_symlink() and not is_directory and not is_file:
                if file_kind(entry.name) is not None or not os.path.splitext(entry.name)[1]:
                    found.problems[entry.path] = _broken_link_reason(entry.path)
                continue
            if is_directory:
                subdirectories.append((entry.path, relative + os.sep))
            elif is_file:
                kind = file_kind(entry.name)
                if kind is not None and entry.path not in seen_files:
                    seen_files.add(entry.path)
                    found.files.append((entry.path, kind))
        stack.extend(reversed(subdirectories))


def _broken_link_reason(path: str) -> str:
    try:
        os.stat(path)
    except OSError as error:
        if error.errno == 40:  # ELOOP
            return "symlink loop: the link resolves to itself"
        return f"dangling symlink: {error.strerror or error}"
    return "not a regular file"


def relative_display(path: str) -> str:
    """`path` relative to the working directory when it is below it, for output."""
    try:
        relative = Path(path).resolve().relative_to(Path.cwd())
    except ValueError:
        return path
    return str(relative)


