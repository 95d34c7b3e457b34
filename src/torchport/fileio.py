"""Writing files so that an interrupt, a full disk or a crash never leaves one half-written."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

__all__ = ["atomic_write", "default_cache_dir", "cache_write"]


def default_cache_dir() -> Path:
    """$TORCHPORT_CACHE_DIR, else $XDG_CACHE_HOME/torchport, else ~/.cache/torchport."""
    explicit = os.environ.get("TORCHPORT_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "torchport"


def atomic_write(path: str | os.PathLike, content: str | bytes) -> None:
    """Replace `path` with `content` (str is written as UTF-8) in one step.

    The content goes to a temporary file in the same directory, which takes the mode of the file it
    replaces (or the mode a new file would get under the umask), is flushed to disk, then renamed over
    `path`. On any failure the temporary file is removed and `path` is left as it was.
    """
    target = Path(os.path.realpath(path))  # a symlink keeps pointing at the rewritten file
    data = content.encode("utf-8") if isinstance(content, str) else content
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def cache_write(path: str | os.PathLike, blob: bytes) -> bool:
    """Write a cache entry in one step (a temporary file renamed over it, not flushed to disk: a lost
    entry only costs the work it saved). False when it could not be written (a read-only folder).
    Not `atomic_write`: that one flushes to disk and reads the process umask by setting it, which a
    write during a threaded import must not do; cache entries stay private to the user (mode 0600)."""
    folder = os.path.dirname(os.fspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=folder, prefix=".", suffix=".tmp")
    except OSError:
        return False
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(blob)
        os.replace(temporary, path)
    except OSError:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        return False
    return True
