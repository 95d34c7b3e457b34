"""Reading and writing the sources `torchport fix` rewrites, so that it writes only what it read.

The promises, each tested in tests/fix/test_fix_write.py:

- The file is decoded as Python decodes it (PEP 263 coding line, UTF-8 BOM) and written back in the
  same encoding, BOM included; line endings are kept by the rewriter, which touches only the nodes
  it fixes.
- Just before writing, the file is read again; if it changed since it was read (an editor saved
  it meanwhile), nothing is written and the file is reported as not processed.
- A read-only file (no write permission bit) is left alone unless `--force`.
- A hard-linked file (more than one name) is left alone unless `--force`, which writes it in place:
  the link is kept and every name sees the fix. Writing through a temporary file and a rename would
  silently split the names into an old and a new copy.
- Otherwise the new content goes to a temporary file that is renamed over the original in one step
  (mode kept, see `torchport.fileio.atomic_write`). When the file belongs to another user or group,
  which a rename would change, it is written in place instead, so its owner stays.
"""

from __future__ import annotations

import io
import os
import stat
import tokenize
from dataclasses import dataclass
from pathlib import Path

from torchport.fileio import atomic_write

__all__ = ["NotProcessed", "Source", "read_source", "check_writable", "write_source"]


class NotProcessed(Exception):
    """A file `fix` leaves as it is; the message says why, for the list of files not processed."""


@dataclass(frozen=True)
class Source:
    """A source file as read: its bytes, decoded text, encoding and status."""

    path: str
    raw: bytes
    text: str
    encoding: str
    status: os.stat_result


def read_source(path: str) -> Source:
    """Read and decode `path` the way Python would; NotProcessed when it cannot be."""
    try:
        raw = Path(path).read_bytes()
        status = os.stat(path)
    except OSError as error:
        raise NotProcessed(f"cannot read it: {error.strerror or error}") from error
    if b"\0" in raw:
        raise NotProcessed("it holds a NUL byte, so it is not Python source")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
    except SyntaxError as error:
        raise NotProcessed(f"its coding line is not usable: {error.msg}") from error
    try:
        text = raw.decode(encoding)
    except (UnicodeDecodeError, LookupError) as error:
        detail = error.reason if isinstance(error, UnicodeDecodeError) else str(error)
        raise NotProcessed(f"not valid {encoding} ({detail})") from error
    return Source(path, raw, text, encoding, status)


def check_writable(source: Source, force: bool) -> None:
    """NotProcessed when writing `source` needs `--force` (read-only or hard-linked)."""
    if force:
        return
    if not source.status.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
        raise NotProcessed("it is read-only; pass --force to fix it anyway (its mode is kept)")
    if source.status.st_nlink > 1:
        raise NotProcessed(
            f"it has {source.status.st_nlink} hard links; pass --force to write it in place, "
            "which keeps the link (every name sees the fix)"
        )


def write_source(source: Source, text: str, force: bool) -> None:
    """Replace `source` with `text`, if the file is still what was read; NotProcessed otherwise."""
    check_writable(source, force)
    try:
        data = text.encode(source.encoding)
    except UnicodeEncodeError as error:
        raise NotProcessed(f"the fixed text cannot be written as {source.encoding}: {error.reason}") from error
    try:
        current = Path(source.path).read_bytes()
    except OSError as error:
        raise NotProcessed(f"it could not be read again before writing: {error.strerror or error}") from error
    if current != source.raw:
        raise NotProcessed("it changed while torchport fix ran; left as is, run fix again")
    status = os.stat(source.path)
    other_owner = (status.st_uid, status.st_gid) != (os.geteuid(), os.getegid()) and os.geteuid() != 0
    if status.st_nlink > 1 or other_owner:
        _write_in_place(source.path, data)
        return
    atomic_write(source.path, data)
    if os.geteuid() == 0 and (status.st_uid, status.st_gid) != (0, 0):
        os.chown(os.path.realpath(source.path), status.st_uid, status.st_gid)


def _write_in_place(path: str, data: bytes) -> None:
    """Overwrite the file's content through its existing inode (keeps links, owner and mode)."""
    mode = os.stat(path).st_mode
    made_writable = not mode & stat.S_IWUSR
    if made_writable:
        os.chmod(path, stat.S_IMODE(mode) | stat.S_IWUSR)
    try:
        with open(path, "r+b") as stream:
            stream.write(data)
            stream.truncate()
            stream.flush()
            os.fsync(stream.fileno())
    finally:
        if made_writable:
            os.chmod(path, stat.S_IMODE(mode))
