"""The result store defends itself: a file that is not a dlrun store, or is damaged, is one line naming it and
what to do (exit 2), for every command, and never a traceback or a silently empty store; a store reached
through a symbolic link is refused, so dlrun never writes or chmods a file it did not create.

Checked before SQLite writes anything: the path and SQLite's companion files (-wal, -shm, -journal) are
not symbolic links, the file is a regular file, and a non-empty file starts with SQLite's header. Checked
on every connection: the tables and columns this dlrun reads are there (`check_tables`), before a schema
migration could touch another program's database. Whatever SQLite itself reports as damage on the way
(`file is not a database`, `database disk image is malformed`, a missing table) becomes the same line.
"""
from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

from dlrun.errors import DlrunError
from dlrun.results.store.schema import RUN_COLUMNS, SCHEMA_VERSION, too_new_error

HEADER = b"SQLite format 3\x00"
COMPANIONS = ("-wal", "-shm", "-journal")
#: Columns of version 1 (every later version adds to them): a table without them is not dlrun's.
V1_RUN_COLUMNS = frozenset(RUN_COLUMNS[:19]) | {"plan", "provenance"}
RESULT_COLUMNS = frozenset({"run_id", "metric", "value", "unit", "data"})


class StoreError(DlrunError):
    """The store could not be written (locked for too long, disk full, not writable): one line."""


class StoreDamaged(StoreError):
    """A store file dlrun cannot use as it is: exit 2, one line, what to do."""

    exit_code = 2


def damaged(path: Path, what: str) -> StoreDamaged:
    return StoreDamaged(f"the result store {str(path)!r} {what}; dlrun leaves it as it is: move it aside (mv "
                        f"{path.name} {path.name}.bad) to start a new store, or put back a backup")


def check_path(path: Path) -> None:
    """Refuse a store (or companion file) that is a symbolic link or not a regular file, and a non-empty
    store file that does not start with SQLite's header."""
    for candidate in (path, *(path.with_name(path.name + suffix) for suffix in COMPANIONS)):
        try:
            mode = os.lstat(candidate).st_mode
        except (FileNotFoundError, NotADirectoryError):  # no store yet (whoever makes it says why it cannot)
            continue
        except OSError as exc:
            raise damaged(path, f"cannot be examined ({exc.strerror})") from None
        if stat.S_ISLNK(mode):
            raise StoreDamaged(f"the result store {str(candidate)!r} is a symbolic link; dlrun opens only a store "
                               "file it created: put the store itself there, or set DLRUN_HOME to its folder")
        if not stat.S_ISREG(mode):
            raise damaged(candidate, "is not a regular file")
    try:
        with open(path, "rb") as handle:
            head = handle.read(len(HEADER))
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as exc:
        raise damaged(path, f"cannot be read ({exc.strerror})") from None
    if head and head != HEADER:
        raise damaged(path, "is not an SQLite database (damaged, or another kind of file)")


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}


def check_tables(conn: sqlite3.Connection, path: Path) -> int:
    """The store's schema version, after refusing a database that is not a dlrun store of that version:
    at version 0 it holds no tables (no dlrun has set it up) or the first dlrun's. Version and tables are read in one
    statement, so a first writer setting the store up meanwhile is seen whole or not at all."""
    version, names = conn.execute(
        "SELECT (SELECT user_version FROM pragma_user_version), "
        "(SELECT group_concat(name, char(10)) FROM sqlite_master WHERE type = 'table')").fetchone()
    tables = set((names or "").split("\n")) - {""}
    if version > SCHEMA_VERSION:
        raise too_new_error(version)
    if version == 0 and not tables:
        return version
    if version == 0 and not {"runs", "results"} <= tables:  # the first dlrun left version 0 with its tables
        raise damaged(path, f"is another program's SQLite database (tables: {', '.join(sorted(tables)[:5])}), "
                            "not a dlrun result store")
    if not {"runs", "results"} <= tables:
        raise damaged(path, "lacks the tables of a dlrun result store (runs, results)")
    need = V1_RUN_COLUMNS | (set(RUN_COLUMNS) if version >= 2 else set())  # version 2 added the rest
    missing = sorted(need - _columns(conn, "runs")) or sorted(RESULT_COLUMNS - _columns(conn, "results"))
    if missing:
        raise damaged(path, f"has a table without the column {missing[0]!r} (not a dlrun store's schema)")
    return version


def is_damage(exc: sqlite3.Error) -> bool:
    """Whether SQLite's error says the file is not a usable store (rather than busy, locked, or a refused row)."""
    if isinstance(exc, (sqlite3.IntegrityError, sqlite3.InterfaceError, sqlite3.ProgrammingError)):
        return False
    text = str(exc).lower()
    if "locked" in text or "busy" in text or "readonly" in text or "disk is full" in text:
        return False
    return type(exc) is sqlite3.DatabaseError or any(
        words in text for words in ("malformed", "not a database", "no such table", "no such column", "corrupt"))
