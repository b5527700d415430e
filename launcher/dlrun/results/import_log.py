"""A log from another tool -> a run record and result rows, in the shape `Store.add_run` takes.

The run is marked as imported (`origin: "import-log"`, the log file's sha256) so that it is never mistaken
for a run dlrun launched itself, and so that importing the same file twice can be detected. A result whose
log shows problems (wrong elements, an average that disagrees with the table) is stored as a failed run
without result rows, the way the executor stores a run whose result cannot be trusted; the parsed numbers
stay in the provenance for inspection.
"""
from __future__ import annotations

import hashlib
import secrets
import time
from pathlib import Path
from typing import Any

from dlrun.errors import UsageError
from dlrun.files import open_regular
from dlrun.results.limits import site_limits, size_text
from dlrun.results.parsers import ParsedResult, ParseError, parse_all

ORIGIN = "import-log"


def read_log(path: Path, limit: int | None = None) -> tuple[str, str]:
    """(text, sha256 of the bytes) of the log file at `path`, the one reader of `dlrun parse` and
    `import-log`; bytes that are not UTF-8 are replaced, never fatal. Only a regular file is read (a FIFO
    or a device is refused before it could block or never end), and at most `limit` bytes (default: the
    site's `limits.log_bytes`): a larger log is refused, one line, exit 2."""
    if limit is None:
        limit = site_limits().log_bytes
    try:
        handle, size = open_regular(Path(path), "log")
    except UsageError as exc:
        raise ParseError(str(exc), exit_code=2) from None
    with handle:
        if size > limit:
            raise ParseError(f"log {str(path)!r} is {size:,} bytes, more than {size_text(limit)} (limits.log_bytes "
                             "in config.yaml)", exit_code=2)
        try:
            data = handle.read(limit + 1)  # a file that grew since: no more than the limit either
        except OSError as exc:
            raise ParseError(f"cannot read {str(path)!r}: {exc.strerror}", exit_code=2) from None
    if len(data) > limit:
        raise ParseError(f"log {str(path)!r} is more than {size_text(limit)} (limits.log_bytes in config.yaml)",
                         exit_code=2)
    return data.decode("utf-8", errors="replace"), hashlib.sha256(data).hexdigest()


def import_records(parsed: ParsedResult, *, system: str, log_path: Path | str, log_sha256: str,
                   index: int = 0, now: float | None = None, site: str | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(run, rows) for `Store.add_run` from one parsed result of the log at `log_path`.

    `index` numbers the results of a log that holds several (nccl-tests runs in a row); `site` is where the
    log was produced, if known (the store records the importing site otherwise)."""
    if not system:
        raise ParseError("import needs the name of the system the log was produced on")
    now = time.time() if now is None else now
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
    nodes = len(parsed.hosts) or None
    per_node = parsed.num_devices // nodes if nodes and parsed.num_devices and parsed.num_devices % nodes == 0 \
        else None
    status = "ok" if parsed.ok else "failed"
    reason = None if parsed.ok else "; ".join(parsed.problems)
    provenance = {"origin": ORIGIN, "log_path": str(log_path), "log_sha256": log_sha256, "log_result_index": index,
                  "format": parsed.kind, "imported_at": stamp, "reason": reason,
                  **({} if parsed.ok else {"parsed": parsed.to_dict()})}
    run = {
        "id": time.strftime("%Y%m%d-%H%M%S", time.gmtime(now)) + "-" + secrets.token_hex(3),
        "created_at": stamp, "finished_at": stamp, "status": status, "origin": ORIGIN, "site": site,
        "workload": f"{parsed.kind}:{parsed.collective}" if parsed.collective else parsed.kind,
        "model": parsed.model, "image": None, "image_digest": None, "system": system,
        "scheduler": None, "launcher": None, "runtime": None, "fabric": None,
        "nodes": nodes, "ranks_per_node": per_node, "world_size": parsed.num_devices,
        "batch_size": parsed.batch_size, "precision": None, "run_dir": None,
        "plan": {"origin": ORIGIN, "format": parsed.kind, "system": system, "collective": parsed.collective,
                 "num_devices": parsed.num_devices, "num_ranks": parsed.num_ranks,
                 "gpus_per_rank": parsed.gpus_per_rank, "hosts": list(parsed.hosts)},
        "provenance": provenance,
    }
    return run, [parsed.to_dict()] if parsed.ok else []


def import_log(path: Path, *, system: str, fmt: str | None = None,
               now: float | None = None, site: str | None = None) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Every result of the log file at `path` as (run, rows) pairs, ready for `Store.add_run`."""
    text, digest = read_log(path)
    return [import_records(parsed, system=system, log_path=path, log_sha256=digest, index=index, now=now,
                           site=site)
            for index, parsed in enumerate(parse_all(text, fmt))]
