"""Calls with a deadline: the call runs on a persistent worker thread while the caller waits at most
`timeout_s` for it, so that a hung call can be left behind and the request answered by someone else.

The handoff is a rendezvous on plain locks (no executor, no futures, no queue): the caller takes an
idle worker, hands it the call and releases the worker's start lock; the worker runs it, puts
itself back on the idle stack and releases the call's done lock. Two thread wake-ups per call and
nothing allocated but the call record. Idle workers are a stack, so the thread that ran the last
call runs the next one, its caches and the library's per-thread state warm.

A call still running at its deadline is abandoned: its worker keeps running it (Python cannot stop
a thread) and returns to the stack when the call ends; until then other workers take the traffic,
up to `limit` threads in all. With every worker busy a call is refused at once (`Busy`), not
queued behind the hung ones.

`call` waits in the caller's thread. `submit` does not wait: the worker calls `on_done(call)` when
the call ends, so that an event loop can hold the deadline itself (one thread wake-up fewer than a
thread waiting on the worker) and `abandon` the call when it passes.

At interpreter exit, calls still running are given `EXIT_WAIT_S` to end (a thread inside torch
while the interpreter finalizes can abort the process).
"""

from __future__ import annotations

import atexit
import sys
import threading
import time
import weakref
from typing import Any, Callable

__all__ = ["Handoff", "Deadline", "Busy"]

#: How long the interpreter's exit waits for calls still running (abandoned past their timeout): a
#: thread still inside torch while the interpreter finalizes can abort the process (SIGABRT
#: "terminate called without an active exception", or SIGSEGV), after every answer was right.
EXIT_WAIT_S = 10.0
_HANDOFFS: weakref.WeakSet = weakref.WeakSet()


def _wait_at_exit() -> None:
    """At interpreter exit, before any `atexit` handler (torch's pybind11 bindings are torn down by
    one, and a call still using them then crashes): stop the idle workers and give running calls up
    to EXIT_WAIT_S to end. A call made after this is refused (`Busy`), so a request still coming in
    is answered by the fallback."""
    handoffs = list(_HANDOFFS)
    for handoff in handoffs:
        handoff.close()
    deadline = time.monotonic() + EXIT_WAIT_S
    while any(handoff.running for handoff in handoffs) and time.monotonic() < deadline:
        time.sleep(0.01)
    # the stopped workers end before the interpreter finalizes: a thread that ran torch code and is
    # still ending (its thread-local state going) while torch's own state is torn down aborts the
    # process ("terminate called without an active exception"), after every answer was right
    for handoff in handoffs:
        for thread in list(handoff._threads):
            thread.join(max(0.0, deadline - time.monotonic()))
    left = sum(handoff.running for handoff in handoffs)
    if left:
        print(f"torchport.serve: {left} model call(s) past their timeout still running after {EXIT_WAIT_S:g} s at "
              "exit; the process may end abnormally while they are inside torch", file=sys.stderr)


# threading's own exit hook runs before every atexit handler (concurrent.futures stops its pools there)
getattr(threading, "_register_atexit", atexit.register)(_wait_at_exit)


class Deadline(Exception):
    """The call did not end within its timeout; it was abandoned and is still running."""


class Busy(Exception):
    """Every worker is running a call (most of them abandoned ones); the call was not started."""


class _Call:
    __slots__ = ("function", "argument", "result", "error", "done", "finished", "abandoned", "on_done")

    def __init__(self, function: Callable[[Any], Any], argument: Any, on_done: Callable[[_Call], None] | None = None):
        self.function = function
        self.argument = argument
        self.result = None
        self.error: BaseException | None = None
        self.done = threading.Lock()
        self.done.acquire()
        self.finished = False
        self.abandoned = False
        self.on_done = on_done


class _Worker:
    __slots__ = ("start", "call", "thread")

    def __init__(self, handoff: Handoff, name: str):
        self.start = threading.Lock()
        self.start.acquire()
        self.call: _Call | None = None
        self.thread = threading.Thread(target=handoff._serve, args=(self,), name=name, daemon=True)
        self.thread.start()


class Handoff:
    """Runs `function(argument)` on one of at most `limit` persistent threads, waiting `timeout_s`."""

    def __init__(self, limit: int, name: str = "torchport-worker"):
        self.limit = limit
        self.name = name
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        self._workers = 0
        self._closed = False
        #: Every worker thread started (joined at interpreter exit).
        self._threads: list[threading.Thread] = []
        #: Calls past their deadline that are still running.
        self.abandoned = 0
        _HANDOFFS.add(self)

    @property
    def running(self) -> int:
        """Threads running a call now (abandoned ones included)."""
        with self._lock:
            return self._workers - len(self._idle)

    @property
    def workers(self) -> int:
        """Threads started so far (idle, busy or running an abandoned call)."""
        return self._workers

    def call(self, function: Callable[[Any], Any], argument: Any, timeout_s: float) -> Any:
        """`function(argument)` run on a worker; raises what it raised, Deadline or Busy."""
        worker = self._take()
        call = _Call(function, argument)
        worker.call = call
        worker.start.release()
        if not call.done.acquire(timeout=timeout_s):
            with self._lock:
                if not call.finished:
                    call.abandoned = True
                    self.abandoned += 1
                    abandoned = True
                else:
                    abandoned = False
            if abandoned:
                raise Deadline(f"no answer within timeout_s={timeout_s}")
            call.done.acquire()  # it ended between the deadline and the check: take its answer
        if call.error is not None:
            error, call.error = call.error, None
            raise error
        return call.result

    def submit(self, function: Callable[[Any], Any], argument: Any, on_done: Callable[[_Call], None]) -> _Call:
        """Start `function(argument)` on a worker and return at once; the worker calls `on_done(call)`
        when it ends (`call.result` / `call.error` set). Raises Busy."""
        worker = self._take()
        call = _Call(function, argument, on_done)
        worker.call = call
        worker.start.release()
        return call

    def abandon(self, call: _Call) -> bool:
        """Give up on a submitted call past its deadline: True when it was still running (its worker
        counts as abandoned until it ends), False when it had already ended."""
        with self._lock:
            if call.finished or call.abandoned:
                return False
            call.abandoned = True
            self.abandoned += 1
            return True

    def _take(self) -> _Worker:
        with self._lock:
            if self._closed:
                raise Busy(f"the {self.name} threads are shut down")
            if self._idle:
                return self._idle.pop()
            if self._workers >= self.limit:
                raise Busy(f"all {self.limit} {self.name} threads are busy ({self.abandoned} of them with calls "
                           "past their timeout)")
            self._workers += 1
            index = self._workers
        try:
            worker = _Worker(self, f"{self.name}-{index}")
            self._threads.append(worker.thread)
            return worker
        except BaseException:  # the thread could not start: its slot is free again
            with self._lock:
                self._workers -= 1
            raise

    def _serve(self, worker: _Worker) -> None:
        while True:
            worker.start.acquire()
            call = worker.call
            worker.call = None
            if call is None:  # close()
                return
            try:
                call.result = call.function(call.argument)
            except BaseException as error:  # handed to the caller, whatever it is; the worker lives on
                call.error = error
            with self._lock:
                call.finished = True
                abandoned = call.abandoned
                if abandoned:
                    self.abandoned -= 1
                closed = self._closed
                if closed:
                    self._workers -= 1
                else:
                    self._idle.append(worker)
            call.done.release()
            if call.on_done is not None:
                try:
                    call.on_done(call)
                except Exception:  # the waiter is gone (its event loop closed): nothing to tell
                    pass
            if abandoned:
                call.result = call.error = None  # nobody will read them
            if closed:
                return

    def close(self) -> None:
        """Stop the idle workers; busy ones stop when their call ends."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            self._workers -= len(idle)
        for worker in idle:
            worker.call = None
            worker.start.release()
