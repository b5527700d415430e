"""A drafted profile as YAML text, each value's source beside it as a comment (a value not known is a
commented-out line saying what to set), checked by the catalog's loader, and set against an existing file as
a unified diff."""
from __future__ import annotations

import difflib
import json
import tempfile
from pathlib import Path

from dlrun.catalog.loader import load_file
from dlrun.catalog.models import SystemSpec

from dlrun.systeminit import NOT_KNOWN, Entry

#: Where the sources list says a value came from, by the start of its source.
_KINDS = (("scheduler", ("scontrol", "sinfo")), ("probed", ("probed on",)))


def _scalar(value) -> str:
    return json.dumps(value, ensure_ascii=False)  # JSON is YAML: quoted strings, flow lists and mappings


def _sources(entries: list[Entry], asked: str | None, host: str, when: str) -> list[str]:
    """The `sources` entries: what was asked of the scheduler, what was probed here, with the values each backs."""
    out = []
    for kind, starts in _KINDS:
        about = [e.path for e in entries if e.value is not None and e.source.startswith(starts)]
        if not about:
            continue
        where = f"{asked} on {host}, {when}" if kind == "scheduler" else f"this node ({host}), {when}"
        out.append("  - " + _scalar({"doc": "dlrun systems init", "where": where, "about": ", ".join(about)}))
    return out


def render(entries: list[Entry], asked: str | None, host: str, when: str) -> str:
    lines = [f"# A system profile drafted by `dlrun systems init` on {host}.",
             "# Each value says where it comes from; a line marked \"" + NOT_KNOWN + "\" is for you to fill in.",
             "# `dlrun systems show NAME` shows the profile as dlrun reads it."]
    parent = None
    for entry in entries:
        top, _, child = entry.path.partition(".")
        if child and top != parent:
            lines.append(f"{top}:")
        parent = top if child else None
        indent, key = ("  ", child) if child else ("", top)
        if entry.value is None:
            lines.append(f"{indent}# {key}: {entry.source}")
        else:
            lines.append(f"{indent}{key}: {_scalar(entry.value)}  # {entry.source}")
    lines += ["sources:", *_sources(entries, asked, host, when)]
    return "\n".join(lines) + "\n"


def validate(text: str, where: Path) -> SystemSpec:
    """The profile as the catalog loads it (CatalogError, `FILE:LINE: field: message`, where it would not)."""
    with tempfile.TemporaryDirectory(prefix="dlrun-systems-init-") as tmp:
        path = Path(tmp) / where.name
        path.write_text(text)
        [spec] = load_file(SystemSpec, path)
    return spec


def diff(old: str, new: str, path: Path) -> str:
    return "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                        f"{path} (now)", f"{path} (drafted)"))
