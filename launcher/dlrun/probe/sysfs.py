"""Small readers shared by the probes: a file's text or None, numbered entries of a sysfs directory."""
from __future__ import annotations

from pathlib import Path


def read_text(path: Path) -> str | None:
    """The stripped text of a file, or None when it cannot be read (absent, permission, not text)."""
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def numeric_entries(directory: Path) -> list[int]:
    try:
        return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())
    except OSError:
        return []
