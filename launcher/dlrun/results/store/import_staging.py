"""Where a bundle import works: `$DLRUN_HOME/imported/.staging-X`, locked (`.staging-X.lock`, taken before the
folder is made) for as long as its import lives. An import killed by a signal leaves its folder behind
unlocked; the next import, or any command that opens the store, removes it (`clean_interrupted_imports`).
Kept apart from the importer so that every command can clean up without loading it."""
from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

from dlrun.errors import DlrunError
from dlrun.files import try_lock

IMPORTED_DIR = "imported"
STAGING_PREFIX = ".staging-"


def clean_interrupted_imports(home: Path) -> list[Path]:
    """Remove the staging directories of imports that no longer run (killed: their lock is free); the ones
    removed. An import locks `.staging-X.lock` before it makes `.staging-X`, so a live one is never taken."""
    imported = home / IMPORTED_DIR
    if not imported.is_dir() or imported.is_symlink():
        return []
    removed = []
    for staging in sorted(imported.glob(STAGING_PREFIX + "*")):
        if staging.suffix == ".lock" or not staging.is_dir() or staging.is_symlink():
            continue
        lock_path = staging.with_name(staging.name + ".lock")
        fd = try_lock(lock_path)
        if fd is None:
            continue
        try:
            shutil.rmtree(staging, ignore_errors=True)
            lock_path.unlink(missing_ok=True)
            removed.append(staging)
        finally:
            os.close(fd)
    return removed


@contextlib.contextmanager
def import_staging(imported: Path) -> Iterator[Path]:
    """A fresh staging directory under `imported`, locked while the import lives, removed after it."""
    name = STAGING_PREFIX + secrets.token_hex(6)
    lock_path = imported / f"{name}.lock"
    fd = try_lock(lock_path)
    if fd is None:  # a random name nobody else has: only a planted file holds it
        raise DlrunError(f"cannot lock {str(lock_path)!r}; remove it and import again")
    staging = imported / name
    try:
        staging.mkdir(mode=0o700)
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        lock_path.unlink(missing_ok=True)
        os.close(fd)
