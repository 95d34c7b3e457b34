"""Helpers shared by several subcommands (not a subcommand itself)."""

from __future__ import annotations

import os
from collections.abc import Iterable

from torchport.errors import UsageError

__all__ = ["TARGET_ENV", "target_setting", "check_output_path", "write_output"]

#: The environment variable that sets --target of scan and check.
TARGET_ENV = "TORCHPORT_TARGET"


def target_setting(flag: str | None) -> str | None:
    """--target or, without it, $TORCHPORT_TARGET; both set to different values is a usage error."""
    environment = (os.environ.get(TARGET_ENV) or "").strip() or None
    flag = (flag or "").strip() or None
    if flag and environment and flag != environment:
        from torchport.errors import ConfigConflictError

        raise ConfigConflictError("--target", flag, TARGET_ENV, environment)
    return flag or environment


def check_output_path(path: str | None, inputs: Iterable[str] = (), flag: str = "--output") -> None:
    """Fail before any work when the report could not be written to `path`, or would replace one of
    `inputs` (the files the command reads)."""
    if not path:
        return
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise UsageError(
            f"Cannot write the report to {path!r}: folder {folder!r} does not exist. "
            f"Create it first or pass another {flag} path."
        )
    if os.path.isdir(path):
        raise UsageError(f"Cannot write the report to {path!r}: it is a folder. Pass a file path to {flag}.")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(
            f"Cannot write the report to {path!r}: folder {folder!r} is not writable. Pass another {flag} path."
        )
    if os.path.lexists(path) and not os.path.isfile(path):
        raise UsageError(
            f"Cannot write the report to {path!r}: it exists and is not a regular file. Pass another {flag} path."
        )
    if os.path.isfile(path) and (not os.access(path, os.W_OK) or not os.stat(path).st_mode & 0o222):
        raise UsageError(
            f"Cannot write the report to {path!r}: the file is read-only. Make it writable or pass another {flag} path."
        )
    real = os.path.realpath(path)
    for source in inputs:
        if not os.path.isdir(source) and os.path.realpath(source) == real:
            raise UsageError(
                f"{flag} {path!r} is also an input ({source!r}); writing the report there would replace it. "
                f"Pass another {flag} path."
            )


def write_output(path: str, content: str) -> None:
    """Write a report to `path` atomically; a failure is a usage error naming the path."""
    from torchport.fileio import atomic_write

    try:
        atomic_write(path, content)
    except OSError as error:
        raise UsageError(
            f"Cannot write the report to {path!r}: {error.strerror or error}. Pick a writable path."
        ) from error
