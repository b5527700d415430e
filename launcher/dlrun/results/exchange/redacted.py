"""What an export takes from a run directory, checked against the run's secret fingerprints
(dlrun.secrets.prints) first: a run whose dlrun died before it could redact the run (or whose files changed
since) leaves no secret in a bundle, its logs (`--with-logs`) included, or in a table. A file that holds one
travels as a redacted copy; the run directory is left as it is (it may be read-only)."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from dlrun.results.exchange.bundle import LogFile, run_directory_files
from dlrun.secrets import Redactor
from dlrun.secrets.prints import PrintsUnusable, key_path, load_prints


def _prints(record: dict[str, Any]) -> Redactor | None:
    """The redactor of a stored run's fingerprints (None without any); PrintsUnusable (one line, exit 2) when
    they cannot be checked."""
    if not record.get("run_dir"):
        return None
    run_dir = Path(record["run_dir"])
    return load_prints(run_dir, key_path(run_dir.parent))


def checked_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records, each without its run's secrets (a record is scanned whole, then redacted where it must)."""
    out = []
    for record in records:
        try:
            redactor = _prints(record)
        except PrintsUnusable:  # its rows were redacted by value when it was stored; its files are refused
            redactor = None
        if redactor is not None:
            dumped = json.dumps(record, ensure_ascii=False, default=str).encode()
            if redactor.matcher.spans(dumped):
                record = redactor.data(record)
        out.append(record)
    return out


def checked_logs(records: list[dict[str, Any]], spool: Path) -> list[LogFile]:
    """The files of the records' run directories as they may travel: a file holding a secret form is replaced
    by a redacted copy in `spool` (a private directory the caller removes once the bundle is written)."""
    logs: list[LogFile] = []
    for record in records:
        if not record.get("run_dir"):
            continue
        redactor = _prints(record)
        for log in run_directory_files(record["id"], Path(record["run_dir"])):
            logs.append(log if redactor is None else _clean(log, redactor, spool))
    return logs


def _clean(log: LogFile, redactor: Redactor, spool: Path) -> LogFile:
    with open(log.source, "rb") as source, tempfile.NamedTemporaryFile(dir=spool, delete=False) as copy:
        changed = redactor.stream(source, copy)
    if not changed:
        Path(copy.name).unlink()
        return log
    return LogFile(log.name, Path(copy.name))
