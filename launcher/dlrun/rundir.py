"""Run directories: built under a hidden staging name and renamed into place when the run ends,
so a reader never sees a half-written run."""
from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


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


class RunDir:
    def __init__(self, root: Path, run_id: str):
        self.root = Path(root)
        self.run_id = run_id
        self.final = self.root / run_id
        self.path = self.root / f".staging-{run_id}"

    def create(self) -> "RunDir":
        self.root.mkdir(parents=True, exist_ok=True)
        self.path.mkdir()
        return self

    def write(self, name: str, text: str, mode: int | None = None) -> Path:
        write_atomic(self.path / name, text, mode)
        return self.path / name

    def write_json(self, name: str, data: Any) -> Path:
        write_json(self.path / name, data)
        return self.path / name

    def publish(self) -> Path:
        """Move the finished run into place; from now on `path` is its final location."""
        os.replace(self.path, self.final)
        self.path = self.final
        return self.final

    def discard(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
