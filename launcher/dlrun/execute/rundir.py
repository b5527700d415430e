"""Run directories: built under a hidden staging name and renamed into place when the run ends,
so a reader never sees a half-written run."""
from __future__ import annotations

import os
import secrets
import shutil
import time
from pathlib import Path
from typing import Any

from dlrun.files import write_atomic, write_json


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


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
