"""Programs on PATH: where they are and the first line of what `--version` prints."""
from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable
from typing import Any


def tool_output(argv: list[str], timeout: float = 10) -> str | None:
    """Combined stdout+stderr of a command, or None when it is not on PATH, cannot start or hangs."""
    if not shutil.which(argv[0]):
        return None
    env = {**os.environ, "USER": os.environ.get("USER") or "root"}  # ch-run refuses to start without USER
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    except (OSError, subprocess.SubprocessError):
        return None
    return (proc.stdout + proc.stderr).strip() or None


def tool_versions(commands: Iterable[str]) -> dict[str, dict[str, Any]]:
    """{command: {path, version}} for each command (version: first line of `command --version`)."""
    found = {}
    for command in sorted(set(commands)):
        path = shutil.which(command)
        text = tool_output([command, "--version"]) if path else None
        found[command] = {"path": path, "version": text.splitlines()[0] if text else None}
    return found
