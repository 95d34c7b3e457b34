"""Launching multi-process gloo programs in tests, given gloo's teardown abort.

gloo's worker threads can abort a process at interpreter exit, after the program has finished and
printed its result ("terminate called without an active exception", SIGABRT). On this 2-core machine
it ends about one launch in eight, of plain PyTorch programs and retargeted ones alike (an upstream
problem: pytorch/pytorch#190489). A launch that ends that way is started again, up to LAUNCHES in
all; any other failure, or that abort every time, stays the test's finding.
"""

from __future__ import annotations

from typing import Callable, TypeVar

__all__ = ["TEARDOWN_ABORT", "LAUNCHES", "relaunched"]

TEARDOWN_ABORT = "terminate called without an active exception"
LAUNCHES = 3
Outcome = TypeVar("Outcome")


def relaunched(launch: Callable[[], Outcome], aborted: Callable[[Outcome], bool]) -> Outcome:
    """`launch()` again while `aborted(outcome)` says it ended in the teardown abort; the last outcome."""
    outcome = launch()
    for _ in range(LAUNCHES - 1):
        if not aborted(outcome):
            break
        outcome = launch()
    return outcome
