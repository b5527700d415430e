"""The one reader of a time limit (`--time`, a system's `scheduler_options.time`): the forms Slurm reads, each
field within its range, at most a year; batch schedulers get whole minutes rounded up
(`SchedulerOptions.time_minutes`), never less than asked."""
from __future__ import annotations

import re

#: The longest time limit a run may ask for: a year (no site's partition allows more; a longer one is a typo).
MAX_TIME_LIMIT_S = 365 * 86400
TIME_FORMS = "MINUTES, MINUTES:SECONDS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"
_TIME = re.compile(r"(?:(?P<days>\d+)-)?(?P<clock>\d+(?::\d{2}){0,2})")


def time_limit_seconds(text: str) -> int:
    """A time limit as Slurm reads it (MINUTES, MINUTES:SECONDS, HOURS:MINUTES:SECONDS, DAYS-HOURS,
    DAYS-HOURS:MINUTES, DAYS-HOURS:MINUTES:SECONDS) in seconds: the one reader of `--time` and a system's
    `scheduler_options.time`. Minutes and seconds after the first field are below 60, hours after days below
    24; zero is no limit to Slurm and refused, and so is a limit over a year (ValueError saying why)."""
    match = _TIME.fullmatch(text) if isinstance(text, str) else None
    if not match:
        raise ValueError(f"not a time limit; valid: {TIME_FORMS}")
    parts = [int(part) for part in match.group("clock").split(":")]
    days = match.group("days")
    names = (("hours", "minutes", "seconds")[:len(parts)] if days is not None else
             (("minutes",), ("minutes", "seconds"), ("hours", "minutes", "seconds"))[len(parts) - 1])
    for index, (name, value) in enumerate(zip(names, parts)):
        limit = 24 if name == "hours" else 60
        if (index > 0 or days is not None) and value >= limit:  # only the first field may be any size
            raise ValueError(f"{value} {name} is not below {limit}; valid: {TIME_FORMS}")
    given = dict(zip(names, parts))
    total = ((int(days or 0) * 24 + given.get("hours", 0)) * 60 + given.get("minutes", 0)) * 60 + given.get("seconds", 0)
    if total == 0:  # Slurm reads --time=0 as no limit at all (PBS and LSF similarly); a local job would end at once
        raise ValueError("a time limit of zero is no limit to Slurm; valid: at least one second")
    if total > MAX_TIME_LIMIT_S:
        raise ValueError("more than a year; valid: a limit of at most 365-00:00:00")
    return total
