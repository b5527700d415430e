"""What a bundle's JSON may hold: JSON read within a budget, and the runs of runs.jsonl checked one line at a
time, as they stream past, and kept on disk (never all in memory) until the bundle is verified.

JSON from a bundle is refused when it holds NaN or Infinity (not JSON, and `--json` output must stay JSON),
nests deeper than Python's parser allows, or has more objects and arrays than `containers`: each costs
memory out of all proportion to its two bytes (`[{},{},...]`), so they are counted before parsing.
"""
from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from dlrun.results.exchange.bundle import RUN_ID, BundleError
from dlrun.results.limits import Limits, size_text
from dlrun.results.store.fields import check_fields
from dlrun.results.store.query import STATUSES
from dlrun.results.store.schema import ORIGINS
from dlrun.results.site import SITE_PATTERN

#: Objects and arrays one run record may hold (a run's plan, provenance and node inventory hold hundreds).
RUN_CONTAINERS = 100_000


def _not_a_number(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def load_json(data: bytes, what: str, containers: int) -> Any:
    """`data` as JSON within the budget of the module notes; BundleError naming `what` otherwise."""
    if data.count(b"{") + data.count(b"[") > containers:
        raise BundleError(f"{what} holds more than {containers:,} JSON objects and arrays; refused")
    try:
        return json.loads(data, parse_constant=_not_a_number)
    except RecursionError:
        raise BundleError(f"{what} is nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, NaN/Infinity, int() refusing more than 4,300 digits
        raise BundleError(f"{what} is not JSON ({str(exc)[:80]})") from None


def _finite(data: Any) -> bool:
    if isinstance(data, float):
        return math.isfinite(data)
    if isinstance(data, dict):
        return all(_finite(value) for value in data.values())
    if isinstance(data, list):
        return all(_finite(item) for item in data)
    return True


class ResultRow(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    metric: str = Field(min_length=1, max_length=200)
    value: float
    unit: str = Field(max_length=200)

    @field_validator("value")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value


class BundleRun(BaseModel):
    """One line of runs.jsonl: the store's columns, key, plan, provenance, result rows, node inventory."""

    model_config = ConfigDict(extra="forbid", strict=True)
    id: str = Field(pattern=RUN_ID.pattern)
    created_at: str = Field(max_length=64)
    finished_at: str | None = Field(default=None, max_length=64)
    status: Literal[STATUSES]  # type: ignore[valid-type]
    workload: str | None = None
    model: str | None = None
    image: str | None = None
    image_digest: str | None = None
    system: str | None = None
    scheduler: str | None = None
    launcher: str | None = None
    runtime: str | None = None
    fabric: str | None = None
    nodes: int | None = None
    ranks_per_node: int | None = None
    world_size: int | None = None
    batch_size: int | None = None
    precision: str | None = None
    run_dir: str | None = None
    site: str | None = Field(default=None, pattern=SITE_PATTERN.pattern)
    origin: Literal[ORIGINS] = "local"  # type: ignore[valid-type]
    experiment: str | None = None
    point: str | None = None
    key_hash: str | None = None
    key: dict[str, Any] | None = None
    plan: dict[str, Any]
    provenance: dict[str, Any]
    results: list[ResultRow]
    inventory: dict[str, Any] | None = None
    # format version 2: the machine and the quality verdict (checked again when stored: dlrun.results.store)
    fingerprint: dict[str, Any] | None = None
    quality: dict[str, Any] | None = None
    verdict: str | None = Field(default=None, max_length=20)


def check_run(line: bytes, number: int) -> dict[str, Any]:
    """One line of runs.jsonl as a checked record (kept as read: numbers stay exact)."""
    what = f"runs.jsonl line {number}"
    raw = load_json(line, what, RUN_CONTAINERS)
    try:
        BundleRun.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise BundleError(f"{what}: field {where}: {first['msg']}") from None
    if not _finite(raw):
        raise BundleError(f"{what}: a number that is not finite (NaN or Infinity)")
    try:  # the store's own check of every field, whatever the origin (times, counts, values)
        check_fields(raw, raw["results"])
    except ValueError as exc:
        raise BundleError(f"{what}: run {raw['id']}: {exc}") from None
    metrics = [row["metric"] for row in raw["results"]]
    if len(set(metrics)) != len(metrics):
        raise BundleError(f"{what}: run {raw['id']} has a metric twice")
    return raw


class RunsSpool:
    """runs.jsonl as it streams out of the archive: split into lines (none longer than
    `limits.run_line_bytes`, no more than the manifest's count: refused at once), each checked and written
    to `path`; the ids and sites of the runs kept. The first line that fails is refused at once: nothing
    after it is worth reading (a line of runs.jsonl is checked before the member's hash is known)."""

    def __init__(self, path: Path | None, limits: Limits, expected: int):
        self._out = open(path, "xb") if path is not None else None
        self.path = path
        self._limit = limits.run_line_bytes
        self._expected = expected
        self._partial = bytearray()
        self._lines = 0
        self.sites: dict[str, str | None] = {}  # run id -> the site it names

    def feed(self, chunk: bytes) -> None:
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            self._partial += chunk[start:end]
            self._line(bytes(self._partial))
            self._partial.clear()
            start = end + 1
        self._partial += chunk[start:]
        if len(self._partial) > self._limit:
            raise BundleError(f"runs.jsonl line {self._lines + 1} is longer than {size_text(self._limit)} "
                              "(limits.run_line_bytes); refused")

    def _line(self, line: bytes) -> None:
        self._lines += 1
        if len(line) > self._limit:
            raise BundleError(f"runs.jsonl line {self._lines} is longer than {size_text(self._limit)} "
                              "(limits.run_line_bytes); refused")
        if self._lines > self._expected:
            raise BundleError(f"runs.jsonl holds more than the {self._expected} runs the manifest says; refused")
        raw = check_run(line, self._lines)
        if raw["id"] in self.sites:
            raise BundleError(f"runs.jsonl line {self._lines}: run {raw['id']} appears twice")
        self.sites[raw["id"]] = raw.get("site")
        if self._out is not None:
            self._out.write(line + b"\n")

    def abort(self) -> None:
        if self._out is not None:
            self._out.close()

    def close(self) -> None:
        """The end of runs.jsonl: a last line without its newline (the writer ends every line) and a count
        other than the manifest's are refused."""
        try:
            if self._partial:
                raise BundleError(f"runs.jsonl line {self._lines + 1} does not end with a newline")
            if self._lines != self._expected:
                raise BundleError(f"runs.jsonl holds {self._lines} runs; the manifest says {self._expected}")
        finally:
            self.abort()


def spooled_runs(path: Path) -> Iterator[dict[str, Any]]:
    """The records a RunsSpool kept, one at a time (they were checked on the way in)."""
    with open(path, "rb") as handle:
        for line in handle:
            yield json.loads(line)
