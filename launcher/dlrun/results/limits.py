"""How much input from elsewhere dlrun reads before it refuses: results bundles (`dlrun results import`) and
other tools' logs (`dlrun parse`, `dlrun results import-log`). Every limit is checked before the bytes it
guards are read into memory or written anywhere.

The defaults suit a site that shares tens of thousands of runs; a site changes them in dlrun's config.yaml
(`$XDG_CONFIG_HOME/dlrun/config.yaml`) as a number of bytes or with a unit (KiB, MiB, GiB):

    limits:
      bundle_bytes: 4 GiB          # a whole bundle, uncompressed (tar headers, members, padding)
      bundle_members: 100000       # members of a bundle (manifest, signature, runs.jsonl, log files)
      manifest_bytes: 16 MiB       # manifest.json
      runs_bytes: 2 GiB            # runs.jsonl
      run_line_bytes: 16 MiB       # one line (one run) of runs.jsonl
      log_member_bytes: 256 MiB    # one run-directory file carried with --with-logs
      tar_header_bytes: 64 KiB     # a PAX or GNU long-name header (names, times of one member)
      padding_bytes: 1 MiB         # zeros after the end of the tar archive
      log_bytes: 256 MiB           # a log given to `dlrun parse` or `dlrun results import-log`

Exporting checks the same limits, so a bundle this site writes is one it would read.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace

from dlrun.errors import UsageError
from dlrun.config import config_file, site_config

_UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "kb": 1000, "mb": 1000 ** 2, "gb": 1000 ** 3}
_SIZE = re.compile(r"^\s*(\d{1,15})\s*([A-Za-z]{0,3})\s*$")


@dataclass(frozen=True)
class Limits:
    bundle_bytes: int = 4 << 30
    bundle_members: int = 100_000
    manifest_bytes: int = 16 << 20
    runs_bytes: int = 2 << 30
    run_line_bytes: int = 16 << 20
    log_member_bytes: int = 256 << 20
    tar_header_bytes: int = 64 << 10
    padding_bytes: int = 1 << 20
    log_bytes: int = 256 << 20


DEFAULT = Limits()


def size_text(n: int) -> str:
    """`4 GiB`, `16 MiB`, `64 KiB`, `512 bytes`: the unit a limit is written in."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n:,} bytes"


def parse_size(value: object, where: str) -> int:
    """A positive size: an integer (bytes, or a count) or `N KiB|MiB|GiB` (also kB, MB, GB)."""
    match = _SIZE.match(str(value)) if not isinstance(value, bool) else None
    factor = _UNITS.get(match.group(2).lower()) if match else None
    if match is None or factor is None or int(match.group(1)) == 0:
        raise UsageError(f"{where}: {value!r} is not a size; valid: a positive number of bytes, or N KiB, N MiB, "
                         "N GiB")
    return int(match.group(1)) * factor


def site_limits() -> Limits:
    """The defaults, with the values of `limits:` in config.yaml."""
    path = config_file()
    given = site_config().get("limits")
    if given is None:
        return DEFAULT
    names = [f.name for f in fields(Limits)]
    if not isinstance(given, dict) or set(given) - set(names):
        unknown = sorted(map(str, set(given) - set(names))) if isinstance(given, dict) else [repr(given)]
        raise UsageError(f"{path}: limits: {unknown[0]} is not a limit; valid: {', '.join(names)}")
    return replace(DEFAULT, **{name: parse_size(value, f"{path}: limits.{name}") for name, value in given.items()})
