"""Writing files so that a reader never sees half of one: write to a temporary file beside it, fsync,
rename into place. Reading a file given from outside only when it is one: a FIFO or a device is refused
before a read could block on it forever or never end (`open_regular`)."""
from __future__ import annotations

import fcntl
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any, BinaryIO

from dlrun.errors import UsageError

_KINDS = ((stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "FIFO"), (stat.S_ISCHR, "character device"),
          (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket"))


def open_regular(path: Path, what: str) -> tuple[BinaryIO, int]:
    """(`path` opened for reading, its size) when it is a regular file or a link to one; anything else is
    one line naming it (exit 2). Opened without blocking, as opening a FIFO with no writer would."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise UsageError(f"cannot read {what} {str(path)!r}: {exc.strerror}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = next((name for test, name in _KINDS if test(mode)), "special file")
        raise UsageError(f"{what} {str(path)!r} is a {kind}, not a regular file; valid: a file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb"), os.fstat(fd).st_size


def try_lock(path: Path) -> int | None:
    """An open descriptor holding the exclusive lock on `path` (created 0600, never through a symbolic link),
    or None when another process holds it or the file cannot be opened."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def write_atomic(path: Path, text: str, mode: int | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, data: Any) -> None:
    write_atomic(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
