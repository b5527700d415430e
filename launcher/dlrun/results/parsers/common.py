"""Helpers every parser shares: launcher tags on output lines, numbers and JSON read without surprises."""
from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Union

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


class LogFile:
    """A log file read again, a line at a time, each time it is iterated: what `dlrun parse` and `import-log`
    hand the parsers, so that reading a log takes memory for a line, not for the log (a 100 MB log took 4x
    its size as text and its list of lines). Its lines are the text's `splitlines()`, bytes that are not
    UTF-8 replaced."""

    def __init__(self, path: Path, limit: int):
        self.path = Path(path)
        self.limit = limit  # bytes read at most (a log that grew past it since it was measured is refused)

    def __iter__(self) -> Iterator[str]:
        from dlrun.files import open_regular  # a regular file, each time: never a FIFO put in its place

        handle, _ = open_regular(self.path, "log")
        read = 0
        with handle:
            for raw in handle:  # split at b"\n"; splitlines() splits what else the text's splitlines would
                read += len(raw)
                if read > self.limit:
                    raise ParseError(f"log {str(self.path)!r} grew past {self.limit:,} bytes while it was read")
                yield from raw.decode("utf-8", errors="replace").splitlines()

    def text(self, start_line: int = 0) -> str:
        """The log from line `start_line` on, as one text (for the parsers of a whole document: fio)."""
        return "\n".join(line for number, line in enumerate(self) if number >= start_line)


Log = Union[str, LogFile]


def log_lines(text: Log) -> Iterator[str]:
    """The lines of a log given as text or as a LogFile (one at a time: no list of all of them)."""
    if isinstance(text, LogFile):
        yield from text
        return
    start = 0  # str.splitlines() of the text, without building its list
    for match in _LINE_END.finditer(text):
        yield text[start:match.start()]
        start = match.end()
    if start < len(text):
        yield text[start:]


#: What str.splitlines() splits at (\r\n as one).
_LINE_END = re.compile("\r\n|[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


def tagged_lines(text: Log) -> Iterator[tuple[int | None, str]]:
    for raw in log_lines(text):
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
