"""The primary's handoff: persistent workers, a call abandoned at its deadline, none queued behind hung ones."""

from __future__ import annotations

import threading
import time

import pytest

from torchport.serve.handoff import Busy, Deadline, Handoff


def test_sequential_calls_reuse_one_warm_worker():
    handoff = Handoff(8)
    threads = {handoff.call(lambda _: threading.get_ident(), None, 5.0) for _ in range(50)}
    assert len(threads) == 1 and handoff.workers == 1
    handoff.close()


def test_errors_of_any_kind_reach_the_caller_and_the_worker_lives_on():
    handoff = Handoff(2)

    def exits(_):
        raise SystemExit(3)

    with pytest.raises(SystemExit):
        handoff.call(exits, None, 5.0)
    with pytest.raises(ValueError, match="bad input"):
        handoff.call(lambda _: (_ for _ in ()).throw(ValueError("bad input")), None, 5.0)
    assert handoff.call(lambda value: value * 2, 21, 5.0) == 42 and handoff.workers == 1
    handoff.close()


def test_a_hung_call_is_abandoned_at_its_deadline_and_later_calls_take_other_workers():
    release = threading.Event()
    handoff = Handoff(2)
    started = time.perf_counter()
    with pytest.raises(Deadline):
        handoff.call(lambda _: release.wait(10), None, 0.05)
    assert time.perf_counter() - started < 2 and handoff.abandoned == 1
    assert handoff.call(lambda value: value + 1, 1, 5.0) == 2  # a second worker answers
    with pytest.raises(Deadline):
        handoff.call(lambda _: release.wait(10), None, 0.05)
    with pytest.raises(Busy, match="2 .* busy"):  # both workers hung: refused at once, not queued
        handoff.call(lambda value: value, 1, 5.0)
    release.set()
    deadline = time.monotonic() + 5
    while handoff.abandoned and time.monotonic() < deadline:
        time.sleep(0.01)
    assert handoff.abandoned == 0 and handoff.call(lambda value: value, 7, 5.0) == 7
    handoff.close()
