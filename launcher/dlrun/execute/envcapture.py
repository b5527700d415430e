"""Capture the environment of a run, with secrets redacted."""
from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
from typing import Any

from dlrun import __version__

SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "KEY", "CREDENTIAL")
REDACTED = "<redacted>"


def is_secret(name: str) -> bool:
    upper = name.upper()
    return any(word in upper for word in SECRET_WORDS)


def redact(env: dict[str, str]) -> dict[str, str]:
    return {name: (REDACTED if is_secret(name) else value) for name, value in sorted(env.items())}


def _first_line(argv: list[str]) -> str | None:
    if not shutil.which(argv[0]):
        return None
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[0] if text else None


def mpi_version() -> str | None:
    line = _first_line(["mpirun", "--version"])
    if line:
        match = re.search(r"\(Open MPI\)\s*(\S+)|Open MPI\S*\s+(\S+)", line)
        return f"openmpi {match.group(1) or match.group(2)}" if match else line
    return None


def capture_environment(environ: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "dlrun_version": __version__,
        "hostname": platform.node(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": sys.version.split()[0],
        "argv": sys.argv,
        "mpi": mpi_version(),
        "env": redact(dict(os.environ if environ is None else environ)),
    }
