"""The two ways the emulated device says no, kept apart.

- The target lacks it: a fact of the target's profile (a refused dtype, an op marked unsupported
  under strict mode, a layout the profile refuses). Raised as `torchport.errors.EmulatedDeviceError`;
  scan and check read the same facts.
- Not emulated yet: a gap of the emulator itself, which says nothing about the target. Raised as
  `NotEmulatedError`, recorded by check's census and counted in its report, and never written into
  a profile.
"""

from __future__ import annotations

from torchport.emulated.state import state
from torchport.errors import TorchportError

__all__ = ["NotEmulatedError", "not_emulated"]


class NotEmulatedError(TorchportError, NotImplementedError):
    """The emulated device cannot run this yet; the real target may well run it."""

    def __init__(self, message: str, op: str = "") -> None:
        super().__init__(message)
        self.op = op


def not_emulated(op: str, what: str) -> NotEmulatedError:
    """The error for `op` the emulator cannot run, recorded by the census when one is installed."""
    profile = state.profile
    target = profile.name if profile is not None else "(none active)"
    recorder = state.recorder
    if recorder is not None and hasattr(recorder, "record_not_emulated"):
        recorder.record_not_emulated(op, what)
    return NotEmulatedError(
        f"{op} is not emulated yet: {what}. This is a gap of torchport's emulated device, not a fact about "
        f"target {target!r}, which may run it. Next step: run this part on the CPU (or on the real device) "
        "to check it, and report the op to torchport.",
        op=op,
    )
