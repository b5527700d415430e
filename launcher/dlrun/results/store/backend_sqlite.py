"""The SQLite backend of the result store: one file, created private to its user (0600), in WAL mode, by
whichever writer comes first; concurrent first writers wait for each other instead of failing (`PRAGMA
journal_mode = WAL` and the schema answer "database is locked" without calling SQLite's busy handler, so they
are retried here). Queries open the store without creating it: a store that does not exist yet reads as empty.
The write transaction is `BEGIN IMMEDIATE`: it takes the write lock up front, so that the aggregates a writer
keeps (dlrun.results.store.samples) are read and written by one writer at a time."""
from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from dlrun.files import file_system_error, is_read_only
from dlrun.paths import private_dir
from dlrun.results.store.check import StoreError, check_path, check_tables, damaged, is_damage
from dlrun.results.store.connection import BUSY_TIMEOUT_S, retry_busy, set_up, uri, wal_bytes
from dlrun.results.store.schema import SCHEMA_VERSION, ensure_schema

T = TypeVar("T")


class SqliteBackend:
    """A store file at `path`."""

    name = "sqlite"

    def __init__(self, path: Path):
        self.path = Path(path)

    def exists(self) -> bool:
        return self.path.exists()

    def retry(self, action: Callable[[], T]) -> T:
        """`action` (a write transaction), again while other writers hold the store."""
        return retry_busy(action, self.path)

    def _create_private(self) -> None:
        """The store file, created 0600 before SQLite opens it (its -wal and -shm files take its mode); never
        through a symbolic link (dlrun.results.store.check), so nothing outside the store's folder is created or
        chmodded."""
        if is_read_only(self.path):  # before anything tries: one line naming the file system
            raise file_system_error(self.path)
        private_dir(self.path.parent)
        check_path(self.path)
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            raise file_system_error(self.path, exc) or StoreError(
                f"cannot create the result store {str(self.path)!r}: {exc.strerror}") from None
        try:
            if os.fstat(fd).st_mode & 0o077 and os.fstat(fd).st_uid == os.getuid():
                os.fchmod(fd, 0o600)  # a store made by an older dlrun
        finally:
            os.close(fd)

    @contextmanager
    def _damage_is_one_line(self) -> Iterator[None]:
        """What SQLite reports as damage, anywhere in a connection's use, as StoreDamaged."""
        try:
            yield
        except sqlite3.Error as exc:
            if is_damage(exc):
                raise damaged(self.path, f"is damaged or not a dlrun store ({exc})") from None
            raise

    def check(self, integrity: bool = False) -> None:
        """Refuse now (one line) a store that every later use would refuse: commands call it first. With
        `integrity`, also one damaged past its header and tables (SQLite's quick_check: every page read, 0.3 s
        for 100,000 runs), as a run does before its job, so that no job runs for a store that cannot take it."""
        with self.reading() as conn:
            if integrity and self.path.is_file():
                found = conn.execute("PRAGMA quick_check(1)").fetchone()[0]
                if found != "ok":
                    raise damaged(self.path, f"is damaged ({' '.join(str(found).split())})")

    @contextmanager
    def connect(self) -> Iterator[sqlite3.Connection]:
        """A connection that writes; the first one creates the store (0600, WAL, schema) or upgrades it."""
        self._create_private()
        with self._damage_is_one_line():
            conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            try:
                conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_S * 1000}")
                retry_busy(lambda: set_up(conn, self.path), self.path)
                conn.execute("PRAGMA foreign_keys = ON")
                yield conn
            finally:
                conn.close()

    def _open_existing(self) -> sqlite3.Connection | None:
        """A connection to the store as it is (read-write, else read-only), upgraded first when older;
        None when no dlrun has set it up yet."""
        # rw lets the last connection remove the -wal/-shm files it used. On a read-only file system (an
        # archived or shared store) SQLite opens a WAL store read-only only with its -shm file there, or as
        # immutable: nothing can change a file there, and without a -wal file every committed row is in it.
        modes = ("rw", "ro") if not is_read_only(self.path) else ("ro", "ro&immutable=1")
        for mode in modes:
            conn = None
            if mode.endswith("immutable=1") and wal_bytes(self.path):
                raise StoreError(f"the result store {str(self.path)!r} is on a read-only file system with a "
                                 "write-ahead log (-wal) but no -shm file, which SQLite cannot read there; valid: "
                                 "copy the store with its -wal file to a writable place, or set DLRUN_HOME there")
            try:
                conn = sqlite3.connect(uri(self.path, mode), uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None)
                conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_S * 1000}")
                version = check_tables(conn, self.path)  # refuses a newer one too
                if version == 0 and not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'runs'").fetchone():
                    conn.close()
                    return None
                if version < SCHEMA_VERSION and mode != "rw" and is_read_only(self.path):
                    raise StoreError(f"the result store {str(self.path)!r} is of an older dlrun (schema "
                                     f"{version}) on a read-only file system, where it cannot be upgraded; valid: "
                                     "copy it to a writable place and set DLRUN_HOME there")
                if version < SCHEMA_VERSION:
                    conn.close()
                    with self.connect():  # the upgrade is one write transaction
                        pass
                    return self._open_existing()
                return conn
            except BaseException as exc:
                if conn is not None:
                    conn.close()
                if isinstance(exc, sqlite3.OperationalError) and not is_damage(exc) and mode != modes[-1]:
                    continue
                if isinstance(exc, sqlite3.OperationalError) and not is_damage(exc):
                    raise file_system_error(self.path, exc) or StoreError(
                        f"cannot read the result store {str(self.path)!r}: {exc}") from None
                raise
        return None

    @contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        """A connection for queries that creates nothing: a store that does not exist yet, or whose first
        writer has not made its tables yet, reads as an empty store. A store of an older schema is
        upgraded first (through a writing connection: the upgrade is one transaction)."""
        check_path(self.path)
        with self._damage_is_one_line():
            conn = self._open_existing() if self.path.is_file() else None
            if conn is None:
                conn = sqlite3.connect(":memory:", isolation_level=None)
                ensure_schema(conn)
            try:
                yield conn
            finally:
                conn.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A connection in one write transaction (BEGIN IMMEDIATE takes the write lock up front), committed
        when the block ends, rolled back when it raises."""
        with self.connect() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

