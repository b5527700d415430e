"""How the store's connections are opened and retried: SQLite's busy handler, then retries with a random
pause while other writers hold the store; the first writer's set-up (WAL, schema); the URI of a read-only
(or, on a read-only file system, immutable) connection."""
from __future__ import annotations

import random
import sqlite3
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from dlrun.files import file_system_error
from dlrun.results.store.check import StoreError, check_tables, damaged, is_damage
from dlrun.results.store.schema import ensure_schema

T = TypeVar("T")
#: How long a writer keeps trying while other writers hold the store (SQLite's busy handler, then retries).
BUSY_TIMEOUT_S = 30
RETRY_FOR_S = 120


def _busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def retry_busy(action: Callable[[], T], path: Path, retry_for: float = RETRY_FOR_S) -> T:
    """Run `action`, again after a short random pause while SQLite reports the store locked or busy; a full or
    read-only file system is its one line (dlrun.files.file_system_error)."""
    deadline = time.monotonic() + retry_for
    pause = 0.02
    while True:
        try:
            return action()
        except sqlite3.OperationalError as exc:
            if is_damage(exc):
                raise damaged(path, f"is damaged ({exc})") from None
            if not _busy(exc):
                raise file_system_error(path, exc) or StoreError(
                    f"cannot write the result store {str(path)!r}: {exc}") from None
            if time.monotonic() > deadline:
                raise StoreError(f"the result store {str(path)!r} stayed locked for {retry_for:.0f} s ({exc}); "
                                 "another dlrun holds it") from None
            time.sleep(pause * (1 + random.random()))
            pause = min(pause * 2, 1.0)


def set_up(conn: sqlite3.Connection, path: Path) -> None:
    check_tables(conn, path)  # before WAL or a migration could change another program's database
    if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
        conn.execute("PRAGMA journal_mode = WAL")
    ensure_schema(conn)


def wal_bytes(path: Path) -> int:
    """The size of the store's write-ahead log (0 when there is none)."""
    try:
        return path.with_name(path.name + "-wal").stat().st_size
    except OSError:
        return 0


def uri(path: Path, mode: str) -> str:
    return f"file:{urllib.parse.quote(str(path.absolute()))}?mode={mode}"
