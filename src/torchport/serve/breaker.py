"""The circuit breaker in front of the primary device.

Closed: traffic goes to the primary; `failure_threshold` failures in a row open it. Open: traffic
goes to the fallback; after `reset_after_s` the primary is probed in the background with a copy of
a live request (the request itself is answered by the fallback). Half-open: probes run one at a
time; `recovery_successes` successes in a row close the breaker, one failure opens it again.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

__all__ = ["CircuitBreaker", "CLOSED", "OPEN", "HALF_OPEN", "STATE_VALUES"]

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"
#: The numbers the breaker-state gauge exports for each state.
STATE_VALUES = {CLOSED: 0, OPEN: 1, HALF_OPEN: 2}


class CircuitBreaker:
    """Thread-safe breaker; `on_change(state)` is called after every transition."""

    def __init__(self, failure_threshold: int = 5, reset_after_s: float = 5.0, recovery_successes: int = 3,
                 clock: Callable[[], float] = time.monotonic, on_change: Callable[[str], None] | None = None):
        if failure_threshold < 1 or recovery_successes < 1 or reset_after_s < 0:
            from torchport.errors import UsageError

            raise UsageError(
                f"Breaker settings failure_threshold={failure_threshold!r}, recovery_successes={recovery_successes!r}, "
                f"reset_after_s={reset_after_s!r} are out of range. Allowed: thresholds >= 1, reset_after_s >= 0."
            )
        self.failure_threshold = failure_threshold
        self.reset_after_s = reset_after_s
        self.recovery_successes = recovery_successes
        self._clock = clock
        self._on_change = on_change
        self._lock = threading.Lock()
        self.state = CLOSED
        self.consecutive_failures = 0
        self.probe_successes = 0
        self.opened_at = 0.0
        self._probe_in_flight = False
        #: Every transition as (state, clock time), oldest first.
        self.history: list[tuple[str, float]] = []

    def _move(self, state: str) -> None:
        """Change state (under the lock); the listener hears each transition once, in order."""
        self.state = state
        if self._on_change is not None:
            self._on_change(state)
        self.history.append((state, self._clock()))
        if state == OPEN:
            self.opened_at = self._clock()
        if state != HALF_OPEN:
            self.probe_successes = 0
        self.consecutive_failures = 0

    def allows_primary(self) -> bool:
        """Whether live traffic may go to the primary now."""
        return self.state == CLOSED

    def try_start_probe(self) -> bool:
        """True (and half-open) when a probe of the primary should start now; only one runs at a time."""
        with self._lock:
            if self.state == CLOSED or self._probe_in_flight:
                return False
            if self.state == OPEN and self._clock() - self.opened_at < self.reset_after_s:
                return False
            if self.state == OPEN:
                self._move(HALF_OPEN)
            self._probe_in_flight = True
        return True

    def force_open(self) -> None:
        """Open now (the primary failed before serving, e.g. on the warm-up example)."""
        with self._lock:
            if self.state != OPEN:
                self._move(OPEN)

    def record_success(self, probe: bool = False) -> None:
        """A primary call (a live request, or a probe when `probe`) succeeded."""
        if not probe and self.state == CLOSED and self.consecutive_failures == 0:
            return  # nothing to change (the common case, kept off the lock)
        with self._lock:
            if probe:
                self._probe_in_flight = False
                if self.state == HALF_OPEN:
                    self.probe_successes += 1
                    if self.probe_successes >= self.recovery_successes:
                        self._move(CLOSED)
            elif self.state == CLOSED:
                self.consecutive_failures = 0

    def probe_inconclusive(self) -> None:
        """The probe's input was bad (the fallback rejects it too): the probe counts neither way and the
        next request may start another."""
        with self._lock:
            self._probe_in_flight = False

    def record_failure(self, probe: bool = False) -> None:
        """A primary call failed; opens the breaker at the threshold, or again after a failed probe."""
        with self._lock:
            if probe:
                self._probe_in_flight = False
                if self.state == HALF_OPEN:
                    self._move(OPEN)
            elif self.state == CLOSED:
                self.consecutive_failures += 1
                if self.consecutive_failures >= self.failure_threshold:
                    self._move(OPEN)
