"""How a checked program ended, whatever way it ended, so that `check` always has a verdict to report.

A program may return, call `sys.exit(code)` (the usual `sys.exit(main())` ending), raise, be sent
SIGTERM or SIGHUP, be interrupted with Ctrl-C, or run past `--timeout`. `watch()` turns each into an
`Ending`: the exit status Python would have given and a sentence for the verdict. Signals and the
timeout are caught only in the main thread (where Python delivers them); elsewhere they act as usual.
"""

from __future__ import annotations

import contextlib
import math
import signal
import sys
import threading
from dataclasses import dataclass

from torchport.errors import UsageError

__all__ = ["Ending", "ProgramStopped", "watch", "exit_status", "check_timeout"]

#: Signals that end a program, caught while it runs under check so the report is still written.
_CAUGHT = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


class ProgramStopped(BaseException):
    """Raised inside the program when check stops it (a signal, Ctrl-C, the timeout).

    A BaseException, so that the program's own `except Exception:` does not swallow it."""


@dataclass
class Ending:
    """How the program ended: `kind` is 'returned', 'exit', 'exception', 'signal', 'interrupted' or 'timeout'."""

    kind: str = "returned"
    exit_code: int = 0
    detail: str = ""

    @property
    def finished(self) -> bool:
        """True when the program ran to its end (returned or exited) with status 0."""
        return self.kind in {"returned", "exit"} and self.exit_code == 0

    def verdict(self) -> str | None:
        """The verdict this ending forces, or None when the census decides."""
        if self.finished:
            return None
        if self.kind == "interrupted":
            return "not finished: interrupted (Ctrl-C); the report covers only what ran before"
        if self.kind == "timeout":
            return f"blocked: the program did not finish within {self.detail} (--timeout); the report covers what ran"
        if self.kind == "signal":
            return f"blocked: the program was ended by {self.detail} on the emulated target"
        if self.kind == "exit":
            return f"blocked: the program exited with code {self.exit_code} on the emulated target"
        return (
            f"blocked: the program failed on the emulated target with exit code {self.exit_code} "
            "(its traceback is printed above)"
        )

    def to_dict(self) -> dict:
        """The JSON form in the report."""
        return {"ended": self.kind, "exit_code": self.exit_code, "detail": self.detail}


def exit_status(code) -> int:
    """The status Python gives `sys.exit(code)`: None is 0, an int is itself, anything else is printed and 1."""
    if code is None:
        return 0
    if isinstance(code, int):  # sys.exit(True) is 1, as in Python
        return code & 0xFF  # as the shell sees it: sys.exit(256) is 0, sys.exit(-1) is 255
    print(code, file=sys.stderr)
    return 1


def check_timeout(seconds: float | None) -> float | None:
    """--timeout: None, or a finite number of seconds greater than 0."""
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) or seconds <= 0:
        raise UsageError(f"--timeout {seconds!r} is not allowed; give a number of seconds greater than 0, e.g. --timeout 600.")
    return float(seconds)


@contextlib.contextmanager
def watch(timeout: float | None = None):
    """Around running the program: yields the Ending, filled in when the block ends.

    Inside the block a signal, Ctrl-C or the timeout raises ProgramStopped in the program; the
    runner prints its traceback and returns, and the Ending says what stopped it."""
    ending = Ending()
    in_main_thread = threading.current_thread() is threading.main_thread()

    def stop(kind: str, detail: str, exit_code: int):
        def handler(signum, frame):
            ending.kind, ending.detail, ending.exit_code = kind, detail, exit_code
            raise ProgramStopped(f"{detail}: stopped by torchport check")

        return handler

    previous = {}
    if in_main_thread:
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, stop("interrupted", "Ctrl-C (SIGINT)", 130))
        for number in _CAUGHT:
            name = signal.Signals(number).name
            previous[number] = signal.signal(number, stop("signal", name, 128 + number))
        if timeout is not None:
            previous[signal.SIGALRM] = signal.signal(signal.SIGALRM, stop("timeout", f"{timeout:g} s", 124))
            signal.setitimer(signal.ITIMER_REAL, timeout)
    elif timeout is not None:
        raise UsageError("A --timeout needs check to run in the main thread. Call check_script from the main thread.")
    try:
        try:
            yield ending
        except SystemExit as error:
            ending.kind, ending.exit_code = "exit", exit_status(error.code)
        except KeyboardInterrupt:  # raised before the handler was in place, or by the program itself
            ending.kind, ending.detail, ending.exit_code = "interrupted", "KeyboardInterrupt", 130
        except ProgramStopped:  # the signal came after the program ended, before the handlers went
            pass
    finally:
        if in_main_thread:
            if timeout is not None:
                signal.setitimer(signal.ITIMER_REAL, 0)
            for number, handler in previous.items():
                signal.signal(number, handler)
