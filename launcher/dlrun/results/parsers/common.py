"""Helpers every parser shares: launcher tags on output lines, numbers and JSON read without surprises."""
from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from dlrun.results.parsers.result import ParseError

#: Prefixes launchers put before each output line: OpenMPI `--tag-output` (`[1,0]<stdout>:`), horovodrun
#: (`[0]<stdout>:`) and Slurm `srun --label` (`0: `, right-aligned as ` 0: ` when there are ten ranks or more).
RANK_TAG = re.compile(r"^(?:\[(?:\d{1,9},)?(?P<mpi>\d{1,9})\]<std(?:out|err)>:|\s{0,8}(?P<srun>\d{1,9}): )")
#: A decimal number as tools print it; longer spellings are refused, not converted. Each way to split the
#: digits is one way to match (no `\d+\.?\d*`), so a line of 20,000 digits that fails later fails in linear time.
NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
MAX_NUMBER_CHARS = 40


def untag(line: str) -> tuple[int | None, str]:
    """(rank, line without its launcher tag); rank None when the line carries no tag."""
    match = RANK_TAG.match(line)
    if not match:
        return None, line
    rest = line[match.end():]
    if match.group("mpi") is not None:
        # Open MPI and horovodrun tag each chunk they read from a rank's pipe: a long line read in two chunks
        # carries the rank's tag again where the second begins (a DLRUN_RESULT line was cut at 2,048 bytes
        # under load), so the same tag inside the line is the launcher's, not the program's.
        rest = rest.replace(match.group(0), "")
    return int(match.group("mpi") or match.group("srun")), rest


def tagged_lines(text: str) -> Iterator[tuple[int | None, str]]:
    for raw in text.splitlines():
        yield untag(raw)


def read_float(text: str, what: str) -> float:
    """A number from a log, finite; a spelling longer than any tool prints is an error, not a value."""
    text = text.strip()
    if len(text) > MAX_NUMBER_CHARS:
        raise ParseError(f"{what}: {text[:20]}... has {len(text)} characters, more than any measurement")
    if not re.fullmatch(NUMBER, text):
        raise ParseError(f"{what}: {text!r} is not a number")
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise ParseError(f"{what}: {text} is not finite")
    return value


def read_int(text: str, what: str) -> int:
    text = text.strip()
    if not re.fullmatch(r"[-+]?\d{1,18}", text):
        raise ParseError(f"{what}: {text[:30]!r} is not an integer of at most 18 digits")
    return int(text)


def read_json(text: str, what: str) -> Any:
    """JSON from a log line; nesting too deep, numbers too long and malformed text are ParseErrors."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ParseError(f"{what}: JSON nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, and int() refusing more than 4,300 digits
        raise ParseError(f"{what}: malformed JSON: {str(exc)[:120]}") from None


def first_rank(items: list[tuple[int | None, Any]]) -> tuple[int | None, Any]:
    """The item printed by the lowest tagged rank, else the first one printed."""
    tagged = [item for item in items if item[0] is not None]
    return min(tagged, key=lambda item: item[0]) if tagged else items[0]


def json_records(text: str, marker: str, what: str) -> Iterator[Any]:
    """The JSON after `marker` on every line holding it; None for a line cut or garbled by other output."""
    for _, line in tagged_lines(text):
        start = line.find(marker)
        if start < 0:
            continue
        try:
            yield read_json(line[start + len(marker):], what)
        except ParseError:
            yield None
