"""nccl-tests (all_reduce_perf and friends): the per-size table, `# Avg bus bandwidth`, and who took part.

Handles the table layouts of several releases (with or without the `Group`, `redop`, `root` columns; `#wrong`
counts or the older `error` column; nccl-tests 2.19's `-I` per-iteration columns `i_min i_max i_p99 i_cv%`
after each half, kept per size in `extra`), output tagged by `mpirun --tag-output`, NCCL INFO lines interleaved
with the table, several GPUs per process (`-g`), and logs that hold several tests one after another. A test that
stopped before its first row is an error naming the first line of the log that says why.
The reported value is the in-place bus bandwidth at the largest message (dlrun's own all-reduce reports the
same); the printed average is kept and checked against the table, since it depends on the size range.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from typing import Any

from dlrun.results.parsers.common import NUMBER, Log, log_lines, read_float, read_int, untag
from dlrun.results.parsers.result import ParsedResult, ParseError, SizeRow
from dlrun.text import plain

NAME = "nccl-tests"
DESCRIPTION = "nccl-tests: per-size rows, `# Avg bus bandwidth`, `Rank N ... device N` lines"
HEADER = re.compile(r"^#?\s*nThread\s+(?P<threads>\d+)\s+nGpus\s+(?P<gpus>\d+)\b")
RANK = re.compile(r"^#?\s*Rank\s+(?P<rank>\d+)\s+(?:Group\s+\d+\s+)?Pid\s+(?P<pid>\d+)\s+on\s+(?P<host>\S{1,200})"
                  r"\s+device\s+(?P<device>\d+)")
COLUMNS = re.compile(r"^#\s*size\s+count\s+type\b")
AVG = re.compile(rf"^#\s*Avg bus bandwidth\s*:\s*(?P<value>{NUMBER})(?:\s+(?P<check>OK|FAILED))?")
OUT_OF_BOUNDS = re.compile(r"^#\s*Out of bounds values\s*:\s*(?P<count>\d+)")
TEST_NAME = re.compile(r"\b(?P<name>all_reduce|all_gather|alltoall|broadcast|reduce_scatter|reduce|sendrecv|"
                       r"scatter|gather|hypercube)_perf\w*")
STARTING = re.compile(r"^#\s*Collective test starting:")
NCCL_VERSION = re.compile(r"NCCL version (\S{1,40})")
#: nccl-tests >= 2.17's first line: `# nccl-tests version 2.19.7 nccl-headers=22304 nccl-library=22304`.
TESTS_VERSION = re.compile(r"^#\s*nccl-tests version (?P<version>\S{1,40})(?:.*nccl-library=(?P<library>\d{1,9}))?")
#: A line that says why a test stopped (nccl-tests' `Invalid number of GPUs`, `Test failure`, an NCCL error).
FAILURE = re.compile(r"(?i)\b(?:error|fail\w*|invalid|abort\w*)\b")
#: The per-iteration columns of `-I 1`, after each half's `#wrong`.
ITER_COLUMNS = ("i_min_us", "i_max_us", "i_p99_us", "i_cv_pct")
INT = re.compile(r"\d{1,20}")
TYPE_BYTES = {"int8": 1, "uint8": 1, "char": 1, "int32": 4, "uint32": 4, "int": 4, "int64": 8, "uint64": 8,
              "half": 2, "float16": 2, "bfloat16": 2, "float": 4, "float32": 4, "double": 8, "float64": 8,
              "f8e4m3": 1, "f8e5m2": 1}
HALVES = ("out_of_place", "in_place")
# Half of the last printed digit of each busbw, plus %g's six significant digits for the average.
AVG_TOLERANCE_ABS, AVG_TOLERANCE_REL = 0.0051, 1e-5


@dataclass
class _Run:
    name: str | None = None
    threads: int | None = None
    gpus: int | None = None
    ranks: list[tuple[int, int, str]] = field(default_factory=list)  # (rank, pid, host)
    check_column: str | None = None  # "#wrong" or "error" once the column header was seen
    rows: list[SizeRow] = field(default_factory=list)
    flagged: list[int] = field(default_factory=list)  # sizes whose error carries nccl-tests' `*`
    avg: float | None = None
    avg_failed: bool = False
    out_of_bounds: int = 0
    per_iteration: bool = False  # the header has `-I`'s i_min i_max i_p99 i_cv% columns
    iter_stats: dict[int, dict[str, dict[str, float]]] = field(default_factory=dict)  # size -> half -> column
    why_stopped: str | None = None  # the first line after the header that says why, while there is no row


def parse(text: Log) -> list[ParsedResult]:
    runs: list[_Run] = []
    version = None
    tests: dict[str, Any] = {}  # nccl-tests' own version line
    named: set[str] = set()  # older releases never print the test's name; a log naming one test still does
    for raw in log_lines(text):
        named.update(match.group("name") for match in TEST_NAME.finditer(raw))
        line = untag(raw)[1]
        if not tests and (match := TESTS_VERSION.match(line)):
            tests = {"nccl_tests_version": match.group("version"), "nccl_library": match.group("library")}
        found = _take_line(runs, line)  # always read: it fills the runs
        version = version or found
    runs = [run for run in runs if run.threads is not None or run.rows or run.avg is not None]
    if not runs:
        return []
    only = next(iter(named)) if len(named) == 1 else None
    version = version or library_version(tests.get("nccl_library"))
    extra = {"nccl_tests_version": tests["nccl_tests_version"]} if tests else {}
    return [_result(run, run.name or only, version, extra) for run in runs]


def library_version(code: Any) -> str | None:
    """NCCL's version from its NCCL_VERSION_CODE (22304 -> 2.23.4; major*10000 + minor*100 + patch since 2.9)."""
    if isinstance(code, str) and code.isdigit():
        code = int(code)
    if isinstance(code, bool) or not isinstance(code, int) or not 20900 <= code < 1_000_000:
        return None
    return f"{code // 10000}.{code // 100 % 100}.{code % 100}"


def _take_line(runs: list[_Run], line: str) -> str | None:
    """Read one line into the runs (a new run starts at a test's banner or header); the NCCL version a line
    that is nothing else names, if any."""
    current = runs[-1] if runs else None
    if STARTING.match(line):
        found = TEST_NAME.search(line)
        runs.append(_Run(name=found.group("name") if found else None))
        return None
    if match := HEADER.match(line):
        if current is None or current.threads is not None:
            current = _Run()
            runs.append(current)
        current.threads = read_int(match.group("threads"), "nccl-tests nThread")
        current.gpus = read_int(match.group("gpus"), "nccl-tests nGpus")
        return None
    if current is None:
        return _version(line)
    if _run_line(current, line):
        return None
    if current.name is None and (found := TEST_NAME.search(line)) and "concluded" in line:
        current.name = found.group("name")
    return _version(line)


def _run_line(run: _Run, line: str) -> bool:
    """Whether `line` is one of a run's own lines (a rank, the column header, the averages, a table row)."""
    if match := RANK.match(line):
        run.ranks.append((read_int(match.group("rank"), "nccl-tests rank"),
                          read_int(match.group("pid"), "nccl-tests pid"), match.group("host")))
    elif COLUMNS.match(line):
        run.check_column = "#wrong" if "#wrong" in line else "error"
        run.per_iteration = "i_cv%" in line
    elif match := AVG.match(line):
        run.avg = read_float(match.group("value"), "nccl-tests average bus bandwidth")
        run.avg_failed = match.group("check") == "FAILED"
    elif match := OUT_OF_BOUNDS.match(line):
        run.out_of_bounds = read_int(match.group("count"), "nccl-tests out-of-bounds count")
    elif run.check_column and _add_row(run, line):
        return True
    else:
        _note_stop(run, line)
        return False
    return True


def _note_stop(run: _Run, line: str) -> None:
    """Keep the first line that says why the test stopped, for as long as the run has no row."""
    if run.rows or line.startswith("#") or not line.strip():
        return
    if run.why_stopped is None or (FAILURE.search(line) and not FAILURE.search(run.why_stopped)):
        run.why_stopped = plain(line, newlines=False).strip()[:200]


def _version(line: str) -> str | None:
    match = NCCL_VERSION.search(line)
    return match.group(1) if match else None


def _add_row(run: _Run, line: str) -> bool:
    """A table row, read from both ends: size count type [redop] [root] then 2 x (time algbw busbw check)."""
    tokens = line.split()
    half = 8 if run.per_iteration else 4  # time algbw busbw check [i_min i_max i_p99 i_cv%]
    if not 3 + 2 * half <= len(tokens) <= 5 + 2 * half or not INT.fullmatch(tokens[0]) \
            or not INT.fullmatch(tokens[1]):
        return False  # an INFO or warning line printed into the table
    middle, halves = tokens[3:-2 * half], (tokens[-2 * half:-half], tokens[-half:])
    tail = halves[0][:4] + halves[1][:4]
    redop = root = None
    for token in middle:
        if re.fullmatch(r"-?\d{1,10}", token):
            root = int(token)
        elif re.fullmatch(r"[A-Za-z_]\w{0,30}", token) and redop is None:
            redop = token
        else:
            return False
    try:
        checks = [_check(tail[3], run.check_column), _check(tail[7], run.check_column)]
        numbers = [read_float(tail[i], "nccl-tests table") for i in (0, 1, 2, 4, 5, 6)]
        stats = {name: dict(zip(ITER_COLUMNS, (read_float(token, f"nccl-tests {name} per-iteration column")
                                               for token in part[4:]))) for name, part in zip(HALVES, halves)}
    except ParseError:
        return False  # not a row after all; a real row never holds these
    size = read_int(tokens[0], "nccl-tests message size")
    if run.per_iteration:
        run.iter_stats[size] = stats
    if any(flagged for _, flagged in checks):
        run.flagged.append(size)
    column = "wrong" if run.check_column == "#wrong" else "error"
    run.rows.append(SizeRow(
        size_bytes=size, count=read_int(tokens[1], "nccl-tests element count"), type=tokens[2][:40],
        redop=None if redop in (None, "none") else redop, root=root,
        oop_time_us=numbers[0], oop_algbw=numbers[1], oop_busbw=numbers[2],
        ip_time_us=numbers[3], ip_algbw=numbers[4], ip_busbw=numbers[5],
        **{f"oop_{column}": checks[0][0], f"ip_{column}": checks[1][0]}))
    return True


def _check(token: str, column: str | None) -> tuple[int | float | None, bool]:
    """(#wrong count or error value, flagged by nccl-tests with `*`); N/A when the run skipped checking."""
    if token == "N/A":
        return None, False
    flagged = token.endswith("*")
    token = token.rstrip("*")
    if column == "#wrong":
        return read_int(token, "nccl-tests #wrong"), flagged
    return read_float(token, "nccl-tests error"), flagged


def _result(run: _Run, name: str | None, version: str | None, extra: dict[str, Any] | None = None) -> ParsedResult:
    if not run.rows:
        if run.why_stopped:
            raise ParseError(f"nccl-tests stopped before its first result row; the log says: {run.why_stopped!r}")
        raise ParseError("nccl-tests output has a header but no result rows (did the test stop early?)")
    largest = max(run.rows, key=lambda row: row.size_bytes)
    hosts = tuple(dict.fromkeys(host for _, _, host in run.ranks))
    processes = len({(host, pid) for _, pid, host in run.ranks}) or None
    per_process = run.threads * run.gpus if run.threads and run.gpus else None
    devices = len(run.ranks) or None
    problems = _problems(run, devices, processes, per_process)
    return ParsedResult(
        kind=NAME, metric="busbw", value=largest.ip_busbw, unit="GB/s",
        num_devices=devices, num_ranks=processes, gpus_per_rank=per_process, hosts=hosts,
        collective=name or _infer_collective(largest, devices), sizes=tuple(run.rows), avg_busbw=run.avg,
        problems=tuple(problems),
        extra={"nccl_version": version, "threads_per_process": run.threads, "gpus_per_thread": run.gpus,
               "check_column": run.check_column, "largest_bytes": largest.size_bytes, **(extra or {}),
               **({"per_iteration": _iteration_extra(run, largest.size_bytes)} if run.iter_stats else {})},
        value_is=f"the in-place busbw column at the largest message size ({largest.size_bytes} bytes)",
    )


def _iteration_extra(run: _Run, largest: int) -> dict[str, Any]:
    """`-I 1`'s columns: per size, each half's i_min/i_max/i_p99 (us, the max over processes of each
    iteration's time) and i_cv% (coefficient of variation), and the largest size's alone."""
    return {"is": "nccl-tests -I 1 columns: min, max and p99 of the per-iteration times in us (each "
                  "iteration's time is the slowest process's), and their coefficient of variation in %",
            "largest": run.iter_stats.get(largest), "sizes": {str(size): stats for size, stats in
                                                                run.iter_stats.items()}}


def _problems(run: _Run, devices: int | None, processes: int | None, per_process: int | None) -> list[str]:
    problems = []
    wrong = {row.size_bytes: (row.oop_wrong or 0) + (row.ip_wrong or 0) for row in run.rows}
    if any(wrong.values()):
        problems.append(f"{sum(wrong.values())} wrong elements at message sizes "
                        f"{[size for size, count in wrong.items() if count]} bytes")
    if run.flagged:
        problems.append(f"errors above nccl-tests' threshold (marked *) at message sizes {run.flagged} bytes")
    if run.out_of_bounds:
        problems.append(f"nccl-tests reported {run.out_of_bounds} out-of-bounds values")
    if run.avg is None:
        problems.append("no '# Avg bus bandwidth' line: the log ends before the test finished")
    else:
        mean = sum(row.oop_busbw + row.ip_busbw for row in run.rows) / (2 * len(run.rows))
        if abs(mean - run.avg) > AVG_TOLERANCE_ABS + AVG_TOLERANCE_REL * run.avg:
            problems.append(f"'# Avg bus bandwidth' {run.avg:g} GB/s disagrees with the table, whose busbw "
                            f"values average {mean:.4f} GB/s")
    if run.avg_failed:
        problems.append("nccl-tests marked the average bus bandwidth FAILED (below NCCL_TESTS_MIN_BW)")
    if devices and processes and per_process and devices != processes * per_process:
        problems.append(f"{devices} devices listed, but {processes} processes x {per_process} GPUs each "
                        f"make {processes * per_process}")
    return problems


def _infer_collective(row: SizeRow, devices: int | None) -> str | None:
    """Older nccl-tests never print the test's name; the columns still tell an all-reduce apart."""
    size_of = TYPE_BYTES.get(row.type)
    if size_of is None or row.redop is None:
        return "broadcast" if row.redop is None and row.root is not None and row.root >= 0 else None
    if row.root is not None and row.root >= 0:
        return "reduce"
    if row.count * size_of == row.size_bytes:
        return "all_reduce"
    if devices and row.count * size_of * devices == row.size_bytes:
        return "reduce_scatter"
    return None
