"""Launching multi-process gloo programs in tests, given gloo's teardown abort.

gloo's worker threads can abort a process at interpreter exit, after the program has finished and
printed its result ("terminate called without an active exception", SIGABRT). On this 2-core machine
it ends about one launch in eight, of plain PyTorch programs and retargeted ones alike (an upstream
problem: pytorch/pytorch#190489). A launch that ends that way is started again, up to LAUNCHES in
all, from the state it started in (files it wrote in its folder are removed first: a training script
would otherwise resume from its own snapshot); any other failure, or that abort every time, stays the
test's finding.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Callable, TypeVar

__all__ = ["TEARDOWN_ABORT", "LAUNCHES", "relaunched"]

TEARDOWN_ABORT = "terminate called without an active exception"
LAUNCHES = 3
Outcome = TypeVar("Outcome")


def relaunched(launch: Callable[[], Outcome], aborted: Callable[[Outcome], bool],
               folder: str | os.PathLike | None = None) -> Outcome:
    """`launch()` again while `aborted(outcome)` says it ended in the teardown abort; the last outcome.
    What the aborted launch added under `folder` is removed before the next one."""
    before = _listing(folder)
    outcome = launch()
    for _ in range(LAUNCHES - 1):
        if not aborted(outcome):
            break
        _remove_added(folder, before)
        outcome = launch()
    return outcome


def _listing(folder) -> set[Path]:
    return set() if folder is None or not os.path.isdir(folder) else set(Path(folder).rglob("*"))


def _remove_added(folder, before: set[Path]) -> None:
    for path in sorted(_listing(folder) - before, key=lambda item: len(item.parts)):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        elif path.exists() or path.is_symlink():
            path.unlink()
