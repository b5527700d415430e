"""Whether comparability keys match: one sentence per field that differs, or is unknown, between two keys or
within a set of them (dlrun.results.key makes the keys)."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from dlrun.results.key import KEY_FIELDS, UNKNOWN, Key


def has_unknown(key: Key, ignore: Iterable[str] = ()) -> list[str]:
    """Fields of `key` that are unknown, apart from `ignore`."""
    skip = set(ignore)
    return [name for name in KEY_FIELDS if name not in skip and key.get(name) == UNKNOWN]


def differences(a: Key, b: Key, ignore: Iterable[str] = ()) -> list[str]:
    """Why `a` and `b` are not like-for-like, one sentence per field; [] when they are.

    `ignore` names fields allowed to differ (the axis a comparison is made along)."""
    skip = set(ignore)
    out = []
    for name, label in KEY_FIELDS.items():
        if name in skip:
            continue
        va, vb = a.get(name, UNKNOWN), b.get(name, UNKNOWN)
        if va == UNKNOWN and vb == UNKNOWN:
            out.append(f"{label}: unknown on both sides (cannot tell whether they match)")
        elif UNKNOWN in (va, vb):
            out.append(f"{label}: {va} ≠ {vb} (cannot tell whether they match)")
        elif va != vb:
            out.append(f"{label}: {va} ≠ {vb}")
    return out


def spread(keys: Iterable[tuple[Key, int]], ignore: Iterable[str] = ()) -> list[str]:
    """Differences within a set of keys, each given with how many runs carry it; [] when like-for-like.

    One sentence per field: "precision: fp32 (3 runs), amp(bfloat16) (2 runs)", or "image digest:
    unknown for 4 runs (cannot tell whether they match)" (an unknown field of even one group of repeats
    is a difference: its runs cannot be shown to match each other)."""
    skip = set(ignore)
    keys = list(keys)
    total = sum(runs for _, runs in keys)
    out = []
    for name, label in KEY_FIELDS.items():
        if name in skip:
            continue
        counts: dict[Any, int] = {}
        for key, runs in keys:
            value = key.get(name, UNKNOWN)
            counts[value] = counts.get(value, 0) + runs
        unknown = counts.pop(UNKNOWN, 0)
        doubt = " (cannot tell whether they match)"
        if counts and (len(counts) > 1 or unknown):
            listed = " ≠ ".join(f"{value} ({_runs(n)})"
                                     for value, n in sorted(counts.items(), key=lambda i: str(i[0])))
            out.append(f"{label}: {listed}" + (f" ≠ unknown ({_runs(unknown)}){doubt}" if unknown else ""))
        elif unknown and total > 1:  # one run alone matches nothing, so nothing is unknown about a match
            out.append(f"{label}: unknown for {_runs(unknown)}{doubt}")
    return out


def _runs(n: int) -> str:
    return f"{n} run" if n == 1 else f"{n} runs"
