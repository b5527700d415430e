"""Where dlrun keeps run directories and the result store: `$DLRUN_HOME`, else `$XDG_DATA_HOME/dlrun`."""
from __future__ import annotations

import os
from pathlib import Path


def dlrun_home() -> Path:
    if os.environ.get("DLRUN_HOME"):
        return Path(os.environ["DLRUN_HOME"])
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "dlrun"


def runs_dir() -> Path:
    return dlrun_home() / "runs"


def store_path() -> Path:
    return dlrun_home() / "results.sqlite"
