"""Deleting stored runs (`dlrun results delete`), so that a bad import can be undone: the rows in one store
transaction, then the run directories dlrun made for them under `$DLRUN_HOME` (`runs/RUN-ID`,
`imported/SITE/RUN-ID`). A run directory anywhere else, a symbolic link, or one whose name is not its run's
id is left alone: deleting never reaches outside the dlrun home."""
from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from dlrun.results.store.import_staging import IMPORTED_DIR
from dlrun.results.store import Store


@dataclass(frozen=True)
class Deleted:
    runs: list[str]
    directories: list[Path]


def owned_run_dir(run_id: str, run_dir: str | None, home: Path) -> Path | None:
    """`run_dir` when it is a directory dlrun made for the run under `home`, else None."""
    if not run_dir:
        return None
    path = Path(run_dir)
    if path.name != run_id or path.is_symlink() or not path.is_dir():
        return None
    real_home = Path(os.path.realpath(home))
    parent = Path(os.path.realpath(path.parent))
    if parent == real_home / "runs" or parent.parent == real_home / IMPORTED_DIR:
        return path
    return None


def delete_runs(store: Store, runs: list[dict], home: Path) -> Deleted:
    """Delete `runs` (records with `id` and `run_dir`, as Store.list_runs gives them) and their run
    directories under `home`."""
    deleted = set(store.delete_runs([run["id"] for run in runs]))
    removed = []
    for run in runs:
        path = owned_run_dir(run["id"], run.get("run_dir"), home) if run["id"] in deleted else None
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
            if path.parent.parent.name == IMPORTED_DIR:
                with contextlib.suppress(OSError):
                    path.parent.rmdir()  # the site's folder, once it holds no run
    return Deleted([run["id"] for run in runs if run["id"] in deleted], removed)
