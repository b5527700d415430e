"""Exporting stored runs: as a results bundle for another site (dlrun.results.exchange.bundle), or as a flat table for
spreadsheets and notebooks (CSV, JSON lines, Parquet) with one row per run and metric.

Both take what the store holds and nothing else: a value the store keeps redacted stays redacted, and no
environment or file outside the run's record and run directory is read. A run's record and files are checked
against its secrets' fingerprints first (dlrun.results.exchange.redacted). The node inventory comes from the
run directory's inventory.json (or the provenance of a run that was itself imported).
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from dlrun.errors import UsageError, unknown_name
from dlrun.results.exchange.bundle import LogFile, Written, write_bundle
from dlrun.results.exchange.redacted import checked_logs, checked_records
from dlrun.results.key import KEY_FIELDS
from dlrun.results.limits import site_limits
from dlrun.results.store.query import Filters
from dlrun.results.site import DEFAULT_SITE
from dlrun.results.store import RUN_COLUMNS, Store
from dlrun.telemetry.show import EXPORT_COLUMNS, export_fields
from dlrun.text import csv_cell, plain

TABLE_FORMATS = ("csv", "jsonl", "parquet")
FORMATS = ("bundle", *TABLE_FORMATS)
#: Columns of a flat export, in order; key fields are prefixed `key_` (see dlrun.results.key: the machine's
#: fingerprint is there too, key_cpu ... key_fabric_rate); `verdict` is the run's quality verdict.
RUN_FIELDS = ("id", "site", "origin", "status", "created_at", "finished_at", "workload", "model", "system", "image",
              "image_digest", "scheduler", "launcher", "runtime", "fabric", "nodes", "ranks_per_node", "world_size",
              "batch_size", "precision", "experiment", "point", "key_hash", "verdict")
#: ... then the run's telemetry summary (dlrun.telemetry.show), then one metric per row.
TABLE_COLUMNS = ("run_id", *RUN_FIELDS[1:], *(f"key_{name}" for name in KEY_FIELDS), *EXPORT_COLUMNS, "metric",
                 "value", "unit")
_INTEGERS = ("nodes", "ranks_per_node", "world_size", "batch_size")

assert set(RUN_FIELDS) <= set(RUN_COLUMNS)


def format_of(out: Path, given: str | None) -> str:
    """The export format: as given, else from the file name (.csv, .jsonl, .parquet), else a bundle."""
    if given is not None:
        if given not in FORMATS:
            raise unknown_name("export format", given, FORMATS)
        return given
    suffix = out.suffix.lower().lstrip(".")
    return {"csv": "csv", "jsonl": "jsonl", "ndjson": "jsonl", "parquet": "parquet"}.get(suffix, "bundle")


def selected_records(store: Store, filters: Filters) -> list[dict[str, Any]]:
    """Every stored field of the selected runs (as `Store.get_run` gives them) plus their node inventory,
    sorted by id."""
    records = checked_records(store.get_runs(filters))  # no secret of a run its dlrun could not redact
    for record in records:
        record["inventory"] = _inventory(record)
    return records


def _inventory(record: dict[str, Any]) -> dict[str, Any] | None:
    if isinstance(record["provenance"].get("inventory"), dict):
        return record["provenance"]["inventory"]
    if not record.get("run_dir"):
        return None
    try:
        data = json.loads((Path(record["run_dir"]) / "inventory.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def export_bundle(store: Store, filters: Filters, out: Path, *, site: str, dlrun_version: str,
                  with_logs: bool = False, sign=None) -> Written:
    """Write the selected runs into a bundle; runs that name no site, or the default one, were made here and
    leave as `site`'s. `sign`: see write_bundle."""
    if site == DEFAULT_SITE:
        raise UsageError(f"this site has no name (it is {DEFAULT_SITE!r}); name it before sharing results: "
                         "DLRUN_SITE=NAME, `site: NAME` in config.yaml, or --exporting-site NAME")
    records = selected_records(store, filters)
    if not records:
        raise UsageError("no stored run matches the filters; nothing written")
    with tempfile.TemporaryDirectory(prefix=".dlrun-export-") as spool:
        logs: list[LogFile] | None = checked_logs(records, Path(spool)) if with_logs else None
        for record in records:
            if record.get("site") in (None, DEFAULT_SITE):
                record["site"] = site
        chosen = {name: list(value) if isinstance(value, tuple) else value for name, value in asdict(filters).items()}
        return write_bundle(out, records, site=site, dlrun_version=dlrun_version, filters=chosen, logs=logs,
                            sign=sign, limits=site_limits())


def table_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per run and metric (a run without results gets one row with no metric)."""
    rows = []
    for record in records:
        base = {"run_id": record["id"], **{name: record.get(name) for name in RUN_FIELDS[1:]}}
        key = record.get("key") or {}
        # Key fields mix numbers with `unknown`/`n/a`: text keeps one type per column for Parquet.
        base.update({f"key_{name}": None if name not in key else str(key[name]) for name in KEY_FIELDS})
        base.update(export_fields((record.get("provenance") or {}).get("telemetry")))
        results = sorted(record.get("results") or [], key=lambda r: r["metric"]) or [None]
        for result in results:
            rows.append({**base, "metric": result and result["metric"], "value": result and float(result["value"]),
                         "unit": result and result["unit"]})
    return rows


def _frame(rows: list[dict[str, Any]]):
    try:
        import pandas as pd
    except ImportError:
        raise UsageError("flat exports need pandas: pip install 'dlrun[export]'") from None
    frame = pd.DataFrame(rows, columns=list(TABLE_COLUMNS))
    for name in _INTEGERS:
        frame[name] = frame[name].astype("Int64")
    floats = ("value", *(name for name in EXPORT_COLUMNS if name not in ("energy_covers", "energy_per_sample_unit")))
    for name in floats:
        frame[name] = frame[name].astype("float64")
    for name in TABLE_COLUMNS:
        if name not in _INTEGERS and name not in floats:
            frame[name] = frame[name].astype("string")
    return frame


def _spreadsheet_cell(value: str) -> str:
    return csv_cell(plain(value, newlines=False))


def _spreadsheet_safe(frame):
    """The frame with its text cells as a spreadsheet should take them: stored strings came from logs,
    bundles and other sites, so control characters (a bare CR splits a row for most readers) are dropped
    and a cell a spreadsheet would evaluate as a formula is shown as text (dlrun.text.csv_cell)."""
    safe = frame.copy()
    for name in TABLE_COLUMNS:
        if name not in _INTEGERS and name != "value":
            safe[name] = safe[name].map(_spreadsheet_cell, na_action="ignore").astype("string")
    return safe


def export_table(store: Store, filters: Filters, out: Path, fmt: str) -> int:
    """Write the selected runs as a flat table in `fmt` (csv, jsonl, parquet), atomically; the row count."""
    records = selected_records(store, filters)
    if not records:
        raise UsageError("no stored run matches the filters; nothing written")
    rows = table_rows(records)
    frame = _frame(rows)
    if fmt == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise UsageError("--format parquet needs pyarrow: pip install 'dlrun[export]'") from None
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    os.close(fd)
    try:
        if fmt == "csv":
            _spreadsheet_safe(frame).to_csv(tmp, index=False)
        elif fmt == "jsonl":  # by hand: pandas rounds floats to 10 digits and escapes every `/`
            Path(tmp).write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
        else:
            frame.to_parquet(tmp, engine="pyarrow", index=False)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return len(frame)
