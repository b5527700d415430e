"""Writing files so that a reader never sees half of one: write to a temporary file beside it, fsync,
rename into place. Reading a file given from outside only when it is one: a FIFO or a device is refused
before a read could block on it forever or never end (`open_regular`).

A file system that is full or read-only is one line for every write (`file_system_error`): which file
system (its mount point), how much is free, and what to do; a write that fails so leaves nothing half
written (`write_atomic` removes its temporary file)."""
from __future__ import annotations

import errno
import fcntl
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any, BinaryIO

from dlrun.errors import DlrunError, UsageError

#: errno values that say the file system cannot take a write: full (or over quota), or mounted read-only.
FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
READ_ONLY_ERRNOS = (errno.EROFS,)


class FileSystemError(DlrunError):
    """A write refused by the file system itself (full, over quota, read-only): one line, exit 1."""


def _existing(path: Path) -> Path:
    path = Path(os.path.abspath(path))
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def mount_point(path: Path) -> Path:
    """The mount point of the file system that holds `path` (or would hold it: its nearest existing parent)."""
    path = _existing(path)
    while not os.path.ismount(path) and path != path.parent:
        path = path.parent
    return path


def free_bytes(path: Path) -> int | None:
    try:
        info = os.statvfs(_existing(path))
    except OSError:
        return None
    return info.f_bavail * info.f_frsize


def is_read_only(path: Path) -> bool:
    """Whether the file system that holds `path` is mounted read-only."""
    try:
        return bool(os.statvfs(_existing(path)).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _size(count: int | None) -> str:
    if count is None:
        return "an unknown amount"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} bytes"


def file_system_error(path: Path, exc: BaseException | None = None) -> FileSystemError | None:
    """The one line for a write to `path` that its file system refused (`exc`: the error, or None to ask the
    file system itself), or None when the file system is not what refused it."""
    code = getattr(exc, "errno", None)
    text = str(exc).lower() if exc is not None else ""
    full = code in FULL_ERRNOS or "disk is full" in text or (
        exc is not None and "disk i/o error" in text and (free_bytes(path) or 0) < (1 << 20))
    read_only = code in READ_ONLY_ERRNOS or "readonly" in text or "read-only" in text or (
        exc is None and is_read_only(path))
    mount = mount_point(path)
    if full:
        return FileSystemError(f"the file system holding {path} is full ({_size(free_bytes(path))} free on {mount}); "
                               "no file was left half-written: free space there (or set DLRUN_HOME to another file "
                               "system), then run the command again")
    if read_only or (exc is not None and is_read_only(path)):
        return FileSystemError(f"{path} is on a read-only file system ({mount}): dlrun reads a store there "
                               "(list, show, compare, report, export) but cannot write; valid: DLRUN_HOME on a "
                               "writable file system for commands that write")
    return None

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


def remove_orphans(root: Path, pattern: str, lock_name: str, young_s: float = 60.0) -> list[Path]:
    """Remove the folders under `root` matching `pattern` whose lock file (`lock_name` in each) no process
    holds: what a process killed while it worked there left (its lock went with it). A folder without its lock
    file yet is skipped for `young_s` seconds (its process is making it). The folders removed."""
    import shutil
    import time

    removed: list[Path] = []
    for folder in sorted(root.glob(pattern)) if root.is_dir() else []:
        lock_path = folder / lock_name
        try:
            if not lock_path.exists() and time.time() - folder.stat().st_mtime < young_s:
                continue
        except OSError:
            continue  # removed meanwhile
        lock = try_lock(lock_path)
        if lock is None:
            continue  # in use
        try:
            shutil.rmtree(folder, ignore_errors=True)
        finally:
            os.close(lock)
        removed.append(folder)
    return removed


def write_atomic(path: Path, text: str, mode: int | None = None) -> None:
    """`text` into `path`, whole or not at all; a full or read-only file system is one line (FileSystemError)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise file_system_error(path, exc) or exc from None
    try:
        with open(fd, "w", closefd=False) as handle:
            handle.write(text)
            handle.flush()
            os.fsync(fd)
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        problem = file_system_error(path, exc) if isinstance(exc, OSError) else None
        if problem is not None:
            raise problem from None
        raise
    finally:
        os.close(fd)


def write_json(path: Path, data: Any) -> None:
    write_atomic(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
