"""Capture the environment of a run, with secrets redacted (the rule is dlrun.secrets)."""
from __future__ import annotations

import os
import platform
import re
import sys
from collections.abc import Iterable
from typing import Any

from dlrun import __version__
from dlrun.probe.mpi import mpirun_version_text
from dlrun.secrets import REDACTED, redact_argv, redact_env

__all__ = ["REDACTED", "capture_environment", "mpi_version", "redact"]


def redact(env: dict[str, str], marked: Iterable[str] = (), values: Iterable[str] = ()) -> dict[str, str]:
    return redact_env(env, marked, values)


def mpi_version() -> str | None:
    """The host MPI's version line (what the probe found: `mpirun --version`, run once per process)."""
    text = mpirun_version_text()
    line = text.splitlines()[0] if text else None
    if line:
        match = re.search(r"\(Open MPI\)\s*(\S+)|Open MPI\S*\s+(\S+)", line)
        return f"openmpi {match.group(1) or match.group(2)}" if match else line
    return None


def capture_environment(environ: dict[str, str] | None = None, *, marked: Iterable[str] = (),
                        values: Iterable[str] = (), argv: list[str] | None = None) -> dict[str, Any]:
    """This process's facts for `environment.json` and the store: `marked` names and known secret `values`
    are redacted on top of the name and URL rules, in the environment and in the command line."""
    marked, values = list(marked), list(values)
    return {
        "dlrun_version": __version__,
        "hostname": platform.node(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": sys.version.split()[0],
        "argv": redact_argv(sys.argv if argv is None else argv, marked, values),
        "mpi": mpi_version(),
        "env": redact(dict(os.environ if environ is None else environ), marked, values),
    }
