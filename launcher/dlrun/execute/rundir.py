"""Run directories: built under a hidden staging name and renamed into place once the run is stored, so a
reader never sees a half-written run, and private to their user (0700).

The dlrun that builds a run holds a lock on `.dlrun.lock` in it for as long as it lives; the kernel drops
the lock when that dlrun dies, however it dies, which is how the next dlrun tells an orphaned staging
directory (to recover) from one still being run.
"""
from __future__ import annotations

import os
import secrets
import shutil
import time
from pathlib import Path
from typing import Any

from dlrun.errors import DlrunError
from dlrun.files import try_lock, write_atomic, write_json
from dlrun.paths import STAGING_PREFIX

LOCK_NAME = ".dlrun.lock"


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


class RunDir:
    def __init__(self, root: Path, run_id: str):
        self.root = Path(root)
        self.run_id = run_id
        self.final = self.root / run_id
        self.path = self.root / f"{STAGING_PREFIX}{run_id}"
        self._lock: int | None = None

    @classmethod
    def adopt(cls, staging: Path, lock: int) -> "RunDir":
        """An existing staging directory whose lock this process now holds (recovery)."""
        run = cls(staging.parent, staging.name[len(STAGING_PREFIX):])
        run._lock = lock
        return run

    def create(self) -> "RunDir":
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.path.mkdir(mode=0o700)
        self._lock = try_lock(self.path / LOCK_NAME)
        if self._lock is None:  # another dlrun took a directory that is not its own: refuse to share it
            raise DlrunError(f"cannot lock the new run directory {self.path}")
        return self

    def write(self, name: str, text: str, mode: int | None = None) -> Path:
        write_atomic(self.path / name, text, mode)
        return self.path / name

    def write_json(self, name: str, data: Any) -> Path:
        write_json(self.path / name, data)
        return self.path / name

    def publish(self) -> Path:
        """Move the finished (and stored) run into place; from now on `path` is its final location."""
        os.replace(self.path, self.final)
        self.path = self.final
        (self.final / LOCK_NAME).unlink(missing_ok=True)
        self.release()
        return self.final

    def release(self) -> None:
        """Let another dlrun take the run over (the store write failed: the next dlrun stores it)."""
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    def discard(self) -> None:
        self.release()
        shutil.rmtree(self.path, ignore_errors=True)
