"""The circuit breaker on a fake clock, and the shadow comparison's judgement."""

from __future__ import annotations

import pytest
import torch

from torchport.errors import UsageError
from torchport.serve import CLOSED, HALF_OPEN, OPEN, CircuitBreaker, ShadowMonitor, compare_outputs


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_breaker_opens_at_the_threshold_only_for_failures_in_a_row():
    clock = Clock()
    changes = []
    breaker = CircuitBreaker(failure_threshold=3, reset_after_s=10, recovery_successes=2, clock=clock,
                             on_change=changes.append)
    breaker.record_failure()
    breaker.record_failure()
    breaker.record_success()  # resets the run
    breaker.record_failure()
    breaker.record_failure()
    assert breaker.state == CLOSED and breaker.allows_primary()
    breaker.record_failure()
    assert breaker.state == OPEN and not breaker.allows_primary() and changes == [OPEN]


def test_breaker_probes_after_the_reset_time_one_at_a_time_and_closes_after_good_probes():
    clock = Clock()
    breaker = CircuitBreaker(failure_threshold=1, reset_after_s=10, recovery_successes=2, clock=clock)
    breaker.record_failure()
    assert not breaker.try_start_probe()  # too early
    clock.now += 10
    assert breaker.try_start_probe() and breaker.state == HALF_OPEN
    assert not breaker.try_start_probe()  # one probe at a time
    breaker.record_failure(probe=True)
    assert breaker.state == OPEN and not breaker.try_start_probe()  # a bad probe restarts the wait
    clock.now += 10
    assert breaker.try_start_probe()
    breaker.record_success(probe=True)
    assert breaker.state == HALF_OPEN and not breaker.allows_primary()
    assert breaker.try_start_probe()
    breaker.record_success(probe=True)
    assert breaker.state == CLOSED and breaker.allows_primary()
    assert [state for state, _ in breaker.history] == [OPEN, HALF_OPEN, OPEN, HALF_OPEN, CLOSED]


def test_breaker_settings_out_of_range_are_usage_errors():
    with pytest.raises(UsageError, match="failure_threshold=0"):
        CircuitBreaker(failure_threshold=0)


def test_compare_outputs_judges_every_tensor_of_a_structured_output():
    reference = {"logits": torch.ones(2, 3), "hidden": (torch.zeros(2), torch.arange(4.0))}
    same = {"logits": torch.ones(2, 3) + 1e-6, "hidden": (torch.zeros(2), torch.arange(4.0))}
    assert compare_outputs(reference, same).agree
    off = {"logits": torch.ones(2, 3), "hidden": (torch.zeros(2), torch.arange(4.0) * 1.1)}
    result = compare_outputs(reference, off)
    assert not result.agree and any("hidden" in reason and "max abs" in reason for reason in result.reasons)
    missing = {"logits": torch.ones(2, 3)}
    assert "structure differs" in compare_outputs(reference, missing).reasons[0]
    nan = {"logits": torch.full((2, 3), float("nan")), "hidden": (torch.zeros(2), torch.arange(4.0))}
    assert not compare_outputs(reference, nan).agree


def test_shadow_alarm_needs_the_stated_mismatches_within_the_window_and_clears():
    monitor = ShadowMonitor(alarm_after=2, window=3)
    good, bad = torch.ones(4), torch.ones(4) * 2
    monitor.observe(good, bad)
    assert not monitor.alarm
    monitor.observe(good, good)
    monitor.observe(good, bad)
    assert monitor.alarm and monitor.first_alarm_at == 3 and monitor.alarms_raised == 1
    monitor.observe(good, good)
    monitor.observe(good, good)
    assert not monitor.alarm and monitor.mismatches == 2 and monitor.comparisons == 5
