"""Launching multi-process gloo programs in tests, given gloo's teardown abort.

gloo's worker threads can abort a process at interpreter exit, after the program has finished and
printed its result ("terminate called without an active exception", SIGABRT). On this 2-core machine
it ends about one launch in eight when the machine is quiet and more under the test suite's own load
(three in a row seen), of plain PyTorch programs and retargeted ones alike (an upstream
problem: pytorch/pytorch#190489). Less often the same teardown deadlocks instead: the main thread,
holding the GIL, destroys the process group (DDP's Reducer going out of scope) and joins gloo's
worker thread, which waits for the GIL to free the tensors of its last work; the launch then runs
into its timeout. A launch that ends that way is started again, up to LAUNCHES in
all, from the state it started in (its folder is put back as it was: a training script would
otherwise resume from the snapshot the aborted launch wrote); any other failure, or that abort every
time, stays the test's finding.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, TypeVar

__all__ = ["TEARDOWN_ABORT", "LAUNCHES", "relaunched"]

TEARDOWN_ABORT = "terminate called without an active exception"
LAUNCHES = 5
Outcome = TypeVar("Outcome")


def relaunched(launch: Callable[[], Outcome], aborted: Callable[[Outcome], bool],
               folder: str | os.PathLike | None = None) -> Outcome:
    """`launch()` again while `aborted(outcome)` says it ended in the teardown abort; the last outcome.
    `folder` (the launch's own working folder) is put back as it was before each relaunch."""
    with tempfile.TemporaryDirectory() as scratch:
        saved = None
        if folder is not None and os.path.isdir(folder):
            saved = Path(scratch) / "saved"
            shutil.copytree(folder, saved, symlinks=True)
        outcome = launch()
        for _ in range(LAUNCHES - 1):
            if not aborted(outcome):
                break
            if saved is not None:
                shutil.rmtree(folder)
                shutil.copytree(saved, folder, symlinks=True)
            outcome = launch()
    return outcome
