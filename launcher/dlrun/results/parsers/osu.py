"""OSU Micro-Benchmarks (osu_latency, osu_bw, osu_bibw, osu_allreduce and the other collectives): one table
per test, after a `# OSU MPI[-CUDA|-ROCM|-ZE] <Name> Test v<version>` line.

Columns as the releases print them: `# Size  Latency (us)` (point-to-point latency), `# Size  Avg Latency(us)`
with `Min Latency(us)  Max Latency(us)  Iterations` under `-f` (collectives, OMB 7 latency), `# Size  Bandwidth
(MB/s)` (osu_bw, osu_bibw), `# Size  MB/s  Messages/s` (osu_mbw_mr), each with OMB 7's `Validation` column
(Pass or Fail per size) under `--validation`; a size that failed is a problem of the result. OSU's MB is 10^6
bytes (osu_bw divides bytes by 1e6), so GB/s = MB/s / 1000. A log may hold several tests one after another; each is a result.

The value: a latency test reports the latency at its smallest message (what a latency figure of merit is), a
bandwidth test the bandwidth at its largest; `value_is` says which, and every size is kept in `sizes`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from dlrun.results.parsers.common import read_float, read_int, tagged_lines
from dlrun.results.parsers.result import ParsedResult, ParseError

NAME = "osu"
DESCRIPTION = "OSU Micro-Benchmarks: `# OSU MPI ... Test vX` and its Size table"
TITLE = re.compile(r"^# OSU (?P<api>MPI|OpenSHMEM|UPC\+\+|UPC|NCCL)(?:-(?P<device>[A-Za-z]{1,10}))? "
                   r"(?P<name>[A-Za-z /+-]{1,80}?) Test v(?P<version>\S{1,40})\s*$")
COLUMNS = re.compile(r"^#\s*Size\s+(?P<rest>\S.{0,200})$")
DATATYPE = re.compile(r"^# Datatype: (?P<type>[A-Za-z_0-9]{1,40})\.?\s*$")
#: test title -> the binary's name, for the titles whose name does not follow from the title
BINARIES = {"Latency": "osu_latency", "Bandwidth": "osu_bw", "Bi-Directional Bandwidth": "osu_bibw",
            "Multiple Bandwidth / Message Rate": "osu_mbw_mr", "Multi-threaded Latency": "osu_latency_mt"}
MAX_ROWS = 4096
#: What OMB 7 prints in its `Validation` column (`--validation`).
VALIDATION = ("Pass", "Fail")


@dataclass
class _Test:
    title: str
    version: str
    device: str | None
    columns: list[str] = field(default_factory=list)
    datatype: str | None = None
    rows: list[dict] = field(default_factory=list)

    @property
    def bandwidth(self) -> bool:
        return bool(self.columns) and ("Bandwidth" in self.columns[0] or self.columns[0].startswith("MB/s"))


def parse(text: str) -> list[ParsedResult]:
    tests: list[_Test] = []
    for _, line in tagged_lines(text):
        line = line.rstrip()
        if match := TITLE.match(line):
            tests.append(_Test(match.group("name"), match.group("version"), match.group("device")))
        elif not tests:
            continue
        elif match := COLUMNS.match(line):
            if tests[-1].rows:
                raise ParseError(f"OSU {tests[-1].title} Test: a second column header after "
                                 f"{len(tests[-1].rows)} rows")
            tests[-1].columns = _columns(match.group("rest"))
        elif match := DATATYPE.match(line):
            tests[-1].datatype = match.group("type")
        elif tests[-1].columns and not line.startswith("#"):
            _add_row(tests[-1], line)
    return [_result(test) for test in tests if test.columns or test.rows]


def _columns(rest: str) -> list[str]:
    """The column names after `Size`: runs of words separated by two or more spaces."""
    return [name.strip() for name in re.split(r"\s{2,}", rest.strip()) if name.strip()]


def _add_row(test: _Test, line: str) -> None:
    tokens = line.split()
    if not tokens or not tokens[0].isdigit() or len(tokens) - 1 != len(test.columns):
        return  # a launcher's or the MPI library's line printed into the table
    if len(test.rows) >= MAX_ROWS:
        raise ParseError(f"OSU table has more than {MAX_ROWS} rows")
    row = {"bytes": read_int(tokens[0], "OSU message size")}
    for name, token in zip(test.columns, tokens[1:]):
        if name == "Iterations":
            row["iterations"] = read_int(token, "OSU iterations")
        elif name == "Validation":  # OMB 7's `--validation`: each size's data checked, Pass or Fail
            if token not in VALIDATION:
                raise ParseError(f"OSU Validation: {token[:30]!r} is neither {' nor '.join(VALIDATION)}")
            row["validation"] = token
        else:
            row[_key(name)] = read_float(token, f"OSU {name}")
    test.rows.append(row)


def _key(column: str) -> str:
    """`Avg Latency(us)` -> avg_latency_us, `Bandwidth (MB/s)` -> bandwidth_mbs, `Messages/s` -> messages_s."""
    return re.sub(r"[^a-z0-9]+", "_", column.lower().replace("mb/s", "mbs")).strip("_")


def _binary(title: str) -> str:
    return BINARIES.get(title) or "osu_" + re.sub(r"[^a-z0-9]+", "_",
                                                    title.lower().replace(" latency", "")).strip("_")


def _result(test: _Test) -> ParsedResult:
    if not test.rows:
        raise ParseError(f"OSU {test.title} Test v{test.version}: a header but no result rows "
                         "(did the test stop early?)")
    first_column = _key(test.columns[0])
    failed = [row["bytes"] for row in test.rows if row.get("validation") == "Fail"]
    problems = (f"OSU's validation failed at message sizes {failed} bytes",) if failed else ()
    extra = {"benchmark": _binary(test.title), "title": f"{test.title} Test", "osu_version": test.version,
             "device_buffers": test.device.lower() if test.device else None, "datatype": test.datatype,
             "columns": test.columns, "sizes": test.rows}
    if test.bandwidth:
        largest = max(test.rows, key=lambda row: row["bytes"])
        value = largest[first_column] / 1000.0
        extra["value_is"] = (f"bandwidth at the largest message, {largest['bytes']} bytes "
                             f"({largest[first_column]} MB/s, OSU's MB = 10^6 bytes, / 1000)")
        return ParsedResult(kind=NAME, metric="bandwidth", value=value, unit="GB/s", extra=extra,
                            problems=problems, value_is=extra["value_is"])
    smallest = min(test.rows, key=lambda row: row["bytes"])
    extra["value_is"] = f"{test.columns[0].lower()} at the smallest message, {smallest['bytes']} bytes"
    return ParsedResult(kind=NAME, metric="latency", value=smallest[first_column], unit="us", extra=extra,
                        problems=problems, value_is=extra["value_is"])
