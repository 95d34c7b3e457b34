"""Helpers of the contract suite: run a subcommand, and take the state of every file in a folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

#: Variables that would change what a subcommand does; the suite runs without them.
_CLEARED = ("TORCHPORT_TARGET", "TORCHPORT_DEVICE", "TORCHPORT_REPORT", "TORCHPORT_SCOPE", "TORCHPORT_DEBUG",
            "TORCHPORT_COMPARE_REFERENCE", "TORCHPORT_COMPARE_TARGET")


def environment(**extra: str) -> dict[str, str]:
    """os.environ without torchport's settings, plus `extra`."""
    clean = {key: value for key, value in os.environ.items() if key not in _CLEARED}
    return {**clean, **extra}


def cli(*arguments: str, cwd: Path, timeout: float = 240, **env: str) -> subprocess.CompletedProcess:
    """`python -m torchport ARGUMENTS` in `cwd`, with the cache in `cwd`/.cache."""
    return subprocess.run([sys.executable, "-m", "torchport", *arguments], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=environment(TORCHPORT_CACHE_DIR=str(cwd / ".cache"), **env))


def snapshot(folder: Path) -> dict[str, tuple]:
    """Every file under `folder` (outside .cache): its bytes and mode, and where a symlink points."""
    state = {}
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder).as_posix()
        if relative.startswith(".cache"):
            continue
        if path.is_symlink():
            state[relative] = ("link", os.readlink(path))
        elif path.is_file():
            state[relative] = (path.read_bytes(), path.stat().st_mode)
    return state


def one_line_error(stderr: str) -> str:
    """The error line of a usage error; fails when stderr holds a traceback or several errors."""
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("torchport: ")]
    assert len(errors) == 1, stderr
    return errors[0]
