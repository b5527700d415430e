"""Runs whose dlrun died (SIGKILL, a crash, a node reboot, a store that stayed locked), found by the next dlrun
command that opens the store, so that no staging directory is left unlisted.

A staging directory whose lock (`.dlrun.lock`) no process holds is an orphan. If its run had finished, it is
stored as it was recorded. If its job was running: a local job still alive is ended (its keeper ended it
when dlrun died, dlrun.execute.procs; this ends whatever is left), then the run is stored `ok` when the job's
logs hold its result and `lost` otherwise; a batch job still queued or running is left to its scheduler and
stored once it ended. Once the job has ended, and before anything of it is read, every file of the run
directory loses its secrets, found by their keyed fingerprints (dlrun.secrets.prints).
"""
from __future__ import annotations

import json
import platform
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from dlrun.execute.batch import batch_outcome
from dlrun.execute.procs import end_processes, job_processes
from dlrun.execute.record import (STATUSES, parse_first, rank_count_refusal, rank_log_texts,
                                  redact_run_directory, run_row, store_and_publish)
from dlrun.catalog.commands import CommandResult
from dlrun.catalog.models import TRAINING_KINDS
from dlrun.execute.rundir import LOCK_NAME, STAGING_PREFIX, RunDir
from dlrun.files import try_lock
from dlrun.job import JobState
from dlrun.registry import SCHEDULERS
from dlrun.results.parsers.figure_of_merit import parse_command_output
from dlrun.results.store import Store
from dlrun.schedulers.base import SchedulerError
from dlrun.secrets.prints import PrintsUnusable, key_path, load_prints

#: A staging directory without a lock file is being created for this long at most (its dlrun locks it next).
CREATING_S = 60.0


def _json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def recover_runs(runs_root: Path, store: Store) -> list[str]:
    """Store every orphaned run under `runs_root`; return one line for each run still in progress."""
    notes: list[str] = []
    if not runs_root.is_dir():
        return notes
    for staging in sorted(runs_root.glob(STAGING_PREFIX + "*")):
        run_id = staging.name[len(STAGING_PREFIX):]
        lock_path = staging / LOCK_NAME
        try:
            young = time.time() - staging.stat().st_mtime < CREATING_S
        except OSError:
            continue  # published meanwhile
        if not lock_path.exists() and young:
            continue
        lock = try_lock(lock_path)
        if lock is None:
            pid = (_json(staging / "status.json") or {}).get("pid")
            notes.append(f"run {run_id} is running (dlrun pid {pid})")
            continue
        note = recover_run(RunDir.adopt(staging, lock), store)
        if note:
            notes.append(note)
    return notes


def recover_run(run: RunDir, store: Store) -> str | None:
    """Store and publish one orphaned run; a line when it must wait (its batch job still runs)."""
    path = run.path
    summary = _json(path / "plan.json")
    if summary is None:  # its dlrun died while writing the first file: nothing to record
        run.discard()
        return None
    status = _json(path / "status.json") or {}
    provenance = _json(path / "provenance.json") or {}
    started = float(status.get("started_at") or path.stat().st_mtime)
    if status.get("state") in STATUSES:  # finished and recorded on disk, but not stored
        _store_recorded(run, store, summary, status, provenance, started)
        return None
    job = _json(path / "job.json")
    dlrun = f"dlrun (pid {status.get('pid', '?')})"
    outcome = _job_outcome(run, summary, job, dlrun)
    if isinstance(outcome, str):
        run.release()
        return outcome
    state, exit_code, reason, texts = outcome
    result, parsed = _logged_result(summary, [text for text in texts if text])
    collective = (summary.get("workload") or {}).get("kind") not in TRAINING_KINDS
    if (result is not None and state in ("lost", "ok") and parsed.ok and rank_count_refusal(
            parsed, summary["world_size"], summary["nodes"], collective=collective) is None):
        state, reason = "ok", f"recovered from the job's logs after {dlrun} ended"
    finished = time.time()
    if state == "ok":
        run.write_json("result.json", result)
    run.write_json("status.json", {"state": state, "exit_code": exit_code, "reason": reason, "started_at": started,
                                   "finished_at": finished, "duration_s": round(finished - started, 3),
                                   "recovered": True, **({"job_id": job["job_id"]} if job and "job_id" in job else {})})
    record = run_row(summary, run_id=run.run_id, run_dir=run.final, status=state, started=started, finished=finished,
                     provenance={**provenance, "exit_code": exit_code, "reason": reason, "recovered": True})
    store_and_publish(run, store, record, [result] if state == "ok" else [])
    return None


def _logged_result(summary: dict[str, Any], texts: list[str]) -> tuple[dict[str, Any] | None, Any]:
    """The result the job's logs hold: a site command's under its own contract (its ranks are the plan's, as
    `dlrun.execute.record.command_result` reads them), any other workload's through the parsers."""
    workload = summary.get("workload") or {}
    if workload.get("kind") != "command" or not isinstance(workload.get("result"), dict):
        result, parsed, _ = parse_first(texts)
        return result, parsed
    try:
        contract = CommandResult.model_validate({k: v for k, v in workload["result"].items() if v is not None})
    except ValueError:
        return None, None
    parsed, _ = parse_command_output(contract, texts)
    if parsed is None:
        return None, None
    if parsed.num_devices is None:
        ranks = summary["nodes"] if workload.get("run_per") == "node" else summary["world_size"]
        parsed = replace(parsed, num_devices=summary["world_size"], num_ranks=ranks)
    return parsed.to_dict(), parsed


def _store_recorded(run: RunDir, store: Store, summary: dict[str, Any], status: dict[str, Any],
                    provenance: dict[str, Any], started: float) -> None:
    """A run that finished and was recorded on disk, but not stored."""
    redact_by_prints(run)  # its dlrun may have died redacting it
    result = _json(run.path / "result.json")
    extra = {k: v for k, v in status.items() if k not in ("state", "started_at", "finished_at", "duration_s")}
    record = run_row(summary, run_id=run.run_id, run_dir=run.final, status=status["state"], started=started,
                     finished=float(status.get("finished_at") or time.time()), provenance={**provenance, **extra})
    store_and_publish(run, store, record, [result] if result and status["state"] == "ok" else [])


def _job_outcome(run: RunDir, summary: dict[str, Any], job: dict[str, Any] | None, dlrun: str):
    """(state, exit code, reason, log texts) of an orphaned run's job, or a line saying its batch job still runs."""
    if job is not None and "job_id" in job:
        return _batch_outcome(run, summary, job)
    if job is None:
        return "lost", None, f"{dlrun} ended before the job started", []
    if job.get("host") == platform.node():
        end_processes(lambda: job_processes(job.get("session"), str(run.path)))
    redact_by_prints(run)
    texts = [_read(run.path / "output.log"), rank_log_texts(run.path)]
    return "lost", None, f"{dlrun} ended while its job ran; the job was ended and left no result", texts


def redact_by_prints(run: RunDir) -> None:
    """The run directory without its secrets, found by their fingerprints (its dlrun, which knew the values,
    is gone). A run whose fingerprints cannot be checked (the site's key was removed) is stored as it is."""
    try:
        redactor = load_prints(run.path, key_path(run.root))
    except PrintsUnusable:
        return
    if redactor is not None:
        redact_run_directory(run.path, redactor)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _batch_outcome(run: RunDir, summary: dict[str, Any], job: dict[str, Any]):
    """(state, exit code, reason, texts) of an orphaned batch job that ended, or a line saying it has not."""
    name, job_id = job.get("scheduler") or summary["scheduler"], str(job["job_id"])
    scheduler = SCHEDULERS.get(name)
    try:
        state: JobState = scheduler.poll(job_id, run.path)
    except SchedulerError as exc:
        return f"run {run.run_id}: cannot ask {name} about job {job_id} ({exc}); kept for the next dlrun"
    if not (state.done or state.state == "unknown"):
        return f"run {run.run_id}: {name} job {job_id} is {state.state} without its dlrun; stored when it ends"
    outputs = scheduler.output_files(job_id, run.path)
    job_text = "\n".join(_read(p) for p in outputs)
    run.write("output.log", job_text)
    redact_by_prints(run)
    job_text = _read(run.path / "output.log")
    texts = [job_text, rank_log_texts(run.path)]
    status, reason, exit_code = batch_outcome(name, (summary.get("scheduler_options") or {}).get("time"), job_id,
                                              state, texts)
    reason = reason or f"{name} job {job_id} ended {state.raw or state.state} (exit code {exit_code}) after its dlrun"
    # an exit 0 without a result is lost (recover_run stores it ok when the logs hold the result)
    return ("lost" if status == "failed" and exit_code in (0, None) else status), exit_code, reason, texts

