"""A drafted profile as YAML text, each value's source beside it as a comment (a value not known is a
commented-out line saying what to set), checked by the catalog's loader, and set against an existing file as
a unified diff."""
from __future__ import annotations

import difflib
import json
import re
import tempfile
from pathlib import Path

from dlrun.catalog.loader import load_file
from dlrun.catalog.models import SystemSpec

from dlrun.systeminit import NOT_KNOWN, NULL, Entry

#: Where the sources list says a value came from, by the start of its source.
_KINDS = (("scheduler", ("scontrol", "sinfo", "lshosts", "bhosts", "pbsnodes")), ("probed", ("probed on",)))


def _scalar(value) -> str:
    return json.dumps(value, ensure_ascii=False)  # JSON is YAML: quoted strings, flow lists and mappings


def _parts(entry: Entry) -> tuple[str, ...]:
    return tuple(entry.path) if isinstance(entry.path, tuple) else tuple(entry.path.split("."))


def _key(word: str) -> str:
    """A mapping key as YAML reads it back: plain where it is a plain word, else quoted (a partition `gpu.a100`)."""
    return word if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", word) else _scalar(word)


def _sources(entries: list[Entry], asked: str | None, host: str, when: str) -> list[str]:
    """The `sources` entries: what was asked of the scheduler, what was probed here, with the values each backs."""
    out = []
    for kind, starts in _KINDS:
        about = [".".join(_parts(e)) for e in entries if e.value is not None and e.source.startswith(starts)]
        if not about:
            continue
        where = f"{asked} on {host}, {when}" if kind == "scheduler" else f"this node ({host}), {when}"
        out.append("  - " + _scalar({"doc": "dlrun systems init", "where": where, "about": ", ".join(about)}))
    return out


def _body(entries: list[Entry]) -> list[str]:
    """The entries as nested YAML. A mapping is opened only where a value lies under it (an empty `cpu:` would be
    null); a value not known is a comment at the deepest mapping that is open for it, with the rest of its path."""
    valued = {parts[:depth] for entry in entries if entry.value is not None
              for parts in [_parts(entry)] for depth in range(1, len(parts))}
    lines: list[str] = []
    opened: tuple[str, ...] = ()
    for entry in entries:
        parts = _parts(entry)
        if entry.value is None:
            depth = max(d for d in range(len(parts)) if d == 0 or parts[:d] in valued)
        else:
            depth = len(parts) - 1
        header = parts[:depth]
        common = next((i for i, (a, b) in enumerate(zip(opened, header)) if a != b), min(len(opened), len(header)))
        lines += ["  " * i + f"{_key(header[i])}:" for i in range(common, len(header))]
        opened = header
        indent, key = "  " * depth, ".".join(_key(part) for part in parts[depth:])
        value = entry.value
        if value is None:
            lines.append(f"{indent}# {key}: {entry.source}")
        else:
            lines.append(f"{indent}{key}: {'null' if value is NULL else _scalar(value)}  # {entry.source}")
    return lines


def render(entries: list[Entry], asked: str | None, host: str, when: str) -> str:
    lines = [f"# A system profile drafted by `dlrun systems init` on {host}.",
             "# Each value says where it comes from; a line marked \"" + NOT_KNOWN + "\" is for you to fill in.",
             "# `dlrun systems show NAME` shows the profile as dlrun reads it.",
             *_body(entries), "sources:", *_sources(entries, asked, host, when)]
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
