"""A log from another tool -> a run record and result rows, in the shape `Store.add_run` takes.

The run is marked as imported (`origin: "import-log"`, the log file's sha256) so that it is never mistaken
for a run dlrun launched itself, and so that importing the same file twice can be detected. A result whose
log shows problems (wrong elements, an average that disagrees with the table) is stored as a failed run
without result rows, the way the executor stores a run whose result cannot be trusted; the parsed numbers
stay in the provenance for inspection.

Told which workload the log ran (`import_log_as_runs`, dlrun.results.exchange.import_plan), the run is stored in the
shape of a dlrun run of that plan: the columns and the plan record the executor writes
(dlrun.execute.record.run_row), so that its comparability key is the one such a run gets. Without that, the
workload column holds the log's format (`tf_cnn_benchmarks`, `nccl-tests:all_reduce`) and what the log does
not say is unknown.
"""
from __future__ import annotations

import hashlib
import secrets
import time
from pathlib import Path
from typing import Any

from dlrun.catalog import Catalog
from dlrun.catalog.models import TRAINING_KINDS
from dlrun.errors import UsageError
from dlrun.files import open_regular
from dlrun.plan import LocalImage, Plan
from dlrun.results.exchange.import_plan import FOREIGN_CODE, ImportOptions, resolve_import_plan
from dlrun.results.limits import site_limits, size_text
from dlrun.results.parsers import ParsedResult, ParseError, parse_all
from dlrun.results.parsers.common import LogFile

ORIGIN = "import-log"


def read_log(path: Path, limit: int | None = None) -> tuple[LogFile, str]:
    """(the log, sha256 of its bytes) of the log file at `path`, the one reader of `dlrun parse` and
    `import-log`: read a megabyte at a time for its hash, then by the parsers a line at a time (LogFile), so
    that a log takes memory for a line, not for the log; bytes that are not UTF-8 are replaced, never fatal.
    Only a regular file is read (a FIFO or a device is refused before it could block or never end), and at
    most `limit` bytes (default: the site's `limits.log_bytes`): a larger log is refused, one line, exit 2."""
    if limit is None:
        limit = site_limits().log_bytes
    try:
        handle, size = open_regular(Path(path), "log")
    except UsageError as exc:
        raise ParseError(str(exc), exit_code=2) from None
    digest, read = hashlib.sha256(), 0
    with handle:
        if size > limit:
            raise ParseError(f"log {str(path)!r} is {size:,} bytes, more than {size_text(limit)} (limits.log_bytes "
                             "in config.yaml)", exit_code=2)
        try:
            while chunk := handle.read(min(1 << 20, limit + 1 - read)):  # a file that grew: no more than the limit
                digest.update(chunk)
                read += len(chunk)
                if read > limit:
                    break
        except OSError as exc:
            raise ParseError(f"cannot read {str(path)!r}: {exc.strerror}", exit_code=2) from None
    if read > limit:
        raise ParseError(f"log {str(path)!r} is more than {size_text(limit)} (limits.log_bytes in config.yaml)",
                         exit_code=2)
    return LogFile(Path(path), read), digest.hexdigest()


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


def _stamp_and_id(now: float | None) -> tuple[str, str]:
    now = time.time() if now is None else now
    return (time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
            time.strftime("%Y%m%d-%H%M%S", time.gmtime(now)) + "-" + secrets.token_hex(3))


def run_records(parsed: ParsedResult, summary: dict[str, Any], *, sources: dict[str, str], log_path: Path | str,
                log_sha256: str, index: int = 0, now: float | None = None,
                site: str | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(run, rows) of a dlrun run of the plan `summary` (`Plan.summary()`) whose job printed `parsed`: the
    executor's columns and plan record, marked imported. `sources` says which plan field came from the log,
    which from an option and which is dlrun's default."""
    stamp, run_id = _stamp_and_id(now)
    workload, image = summary["workload"], summary["image"]
    result = parsed.to_dict()
    if parsed.kind in FOREIGN_CODE:  # the code that ran: compared with itself, never with dlrun's harness
        result["extra"] = {**result["extra"], "framework": f"{image['framework']}/{FOREIGN_CODE[parsed.kind]}"}
    reason = None if parsed.ok else "; ".join(parsed.problems)
    provenance = {"origin": ORIGIN, "log_path": str(log_path), "log_sha256": log_sha256, "log_result_index": index,
                  "format": parsed.kind, "imported_at": stamp, "reason": reason,
                  "plan_from": {**{name: "dlrun default (not in the key)" for name in ("steps", "warmup_steps",
                                                                                      "threads_per_rank", "scheduler",
                                                                                      "launcher", "runtime")},
                                **sources},
                  **({} if parsed.ok else {"parsed": result})}
    run = {
        "id": run_id, "created_at": stamp, "finished_at": stamp, "status": "ok" if parsed.ok else "failed",
        "origin": ORIGIN, "site": site,
        "workload": workload["name"], "model": workload.get("model"),
        "image": image["name"], "image_digest": image.get("digest"),
        "system": summary["system"]["name"], "scheduler": summary["scheduler"], "launcher": summary["launcher"],
        "runtime": summary["runtime"], "fabric": summary["fabric"],
        "nodes": summary["nodes"], "ranks_per_node": summary["ranks_per_node"], "world_size": summary["world_size"],
        "batch_size": summary["batch_size"] if workload.get("kind") in TRAINING_KINDS else None,
        "precision": summary["precision"], "run_dir": None,
        "plan": summary, "provenance": provenance,
    }
    return run, [result] if parsed.ok else []


def import_log_as_runs(path: Path, *, catalog: Catalog, system: str, options: ImportOptions,
                       fmt: str | None = None, now: float | None = None, site: str | None = None,
                       local_image: LocalImage | None = None) -> list[tuple[dict[str, Any], list[dict[str, Any]], Plan]]:
    """Every result of the log at `path` as (run, rows, plan): the records of a dlrun run of the workload
    `options` name (dlrun.results.exchange.import_plan), and its plan; a UsageError when the options and the log do
    not make one plan."""
    text, digest = read_log(path)
    found = []
    for index, parsed in enumerate(parse_all(text, fmt)):
        resolved = resolve_import_plan(catalog, parsed, system=system, options=options, local_image=local_image)
        run, rows = run_records(parsed, resolved.plan.summary(), sources=resolved.sources, log_path=path,
                                log_sha256=digest, index=index, now=now, site=site)
        found.append((run, rows, resolved.plan))
    return found
