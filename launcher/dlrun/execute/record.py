"""Finishing a run: parse its output, decide its status, write status/result files, store the run with its
provenance, and only then publish the run directory.

Stored before published: a run directory in place always has its row. When the store cannot be written
(after its retries), the run stays in its staging directory with its final `status.json`, the error is one
line, and the next dlrun command that opens the store stores and publishes it (dlrun.execute.recovery).
"""
from __future__ import annotations

import hashlib
import json
import shlex
import sqlite3
import subprocess
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dlrun.execute.hardware import record_hardware
from dlrun.execute.rundir import LOCK_NAME, RunDir
from dlrun.execute.storage import storage_result
from dlrun.fabrics import check_nccl_transport
from dlrun.harness.harness_node import process_started_unix
from dlrun.catalog.models import TRAINING_KINDS
from dlrun.paths import harness_hashes, source_root
from dlrun.plan import Plan
from dlrun.probe.topology import topology_summary
from dlrun.results.fingerprint import fingerprint_of
from dlrun.results.parsers import ParseError, ParsedResult, parse_all, parse_text
from dlrun.results.parsers.figure_of_merit import direction, parse_command_output
from dlrun.results.parsers.result import SECONDARY_METRICS
from dlrun.results.site import local_site
from dlrun.results.store import Store, StoreError
from dlrun.secrets import Redactor, plan_secret_values
from dlrun.secrets.prints import PRINTS_NAME
from dlrun.staging import stage_records, stage_summary

#: The harness's exit code for a number that cannot be (harness_common.EXIT_IMPOSSIBLE: an MFU above 1).
EXIT_IMPOSSIBLE = 7
#: Statuses a stored run can have. `lost`: its dlrun died and the job's result could not be recovered.
STATUSES = ("ok", "failed", "cancelled", "timeout", "lost")


@dataclass
class RunRecord:
    id: str
    path: Path
    status: str  # one of STATUSES
    exit_code: int | None
    result: dict[str, Any] | None = None
    reason: str | None = None
    tail: list[str] = field(default_factory=list)
    signal: str | None = None  # the signal that cancelled the run (SIGINT, SIGTERM, SIGHUP)


def _git_commit() -> str | None:
    """The commit of the source tree dlrun runs from (None for an installed wheel)."""
    root = source_root()
    if root is None or not (root / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=10)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def provenance(plan: Plan, image_check: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the run ran: dlrun's commit, the image and its digest, the harness files' digests, and what the
    pre-run check of the image's copy found (`image_check`, dlrun.execute.prerun)."""
    # A container's harness files are hashed when its image is built (the image lock); the host runs them
    # from this machine, so they are hashed here.
    framework = plan.image.harness_framework or plan.workload.framework
    digest, per_file = (harness_hashes(Path(plan.image.harness_dir), framework)
                        if plan.image.kind == "host" else (None, None))
    return {
        "dlrun_git_commit": _git_commit(),
        "image": plan.image.name,
        "image_digest": plan.image.digest,
        "image_uri": plan.image.uri,
        "harness_sha256": digest,
        "harness_files_sha256": per_file,
        "image_stack": pinned_stack(plan),
        **(command_provenance(plan) if plan.workload.kind == "command" else {}),
        **(image_check or {}),
    }


#: Files a command names that are hashed into its provenance: at most this many, each up to this size.
COMMAND_FILES, COMMAND_FILE_BYTES = 32, 256 * 1024 * 1024


def command_provenance(plan: Plan) -> dict[str, Any]:
    """A site's command as it ran, its sha256, and the sha256 of every file it names that this machine has
    (its script, its input files); files only the image holds are hashed with the image (its digest)."""
    command = str(plan.workload.command)
    try:
        words = shlex.split(command, comments=True)
    except ValueError:  # unbalanced quotes: bash will say so when it runs
        words = command.split()
    files: dict[str, str] = {}
    for word in words:
        path = Path(word.rpartition("=")[2])
        try:
            if len(files) < COMMAND_FILES and path.is_absolute() and path.is_file() \
                    and path.stat().st_size <= COMMAND_FILE_BYTES:
                files[str(path)] = "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError:
            continue
    digest = hashlib.sha256(json.dumps([command, sorted(files.items())]).encode()).hexdigest()
    return {"command": command, "command_files_sha256": files, "command_sha256": f"sha256:{digest}"}


def pinned_stack(plan: Plan) -> dict[str, str]:
    """The CUDA, cuDNN and NCCL versions the plan's image pins (containers/*/image.yaml), where it pins them:
    what the job saw when its framework does not report them (tf_cnn_benchmarks)."""
    out = {}
    for name in ("cuda", "cudnn", "nccl"):
        version = getattr(getattr(plan.image, name, None), "version", None)
        if version:
            out[name] = str(version)
    return out


def with_fingerprint(record: dict[str, Any], rows: list[dict[str, Any]], run_path: Path) -> dict[str, Any]:
    """The record with the fingerprint of the machine it ran on: what the job reported of its node, else (a
    local job, on the node dlrun ran on) the run directory's inventory.json; and the topology summary of the
    job's nodes (their samplers', or for a local job this node's)."""
    try:
        inventory = json.loads((run_path / "inventory.json").read_text())
    except (OSError, ValueError):
        inventory = None
    inventory = inventory if isinstance(inventory, dict) else {}
    if record.get("scheduler") != "local":  # dlrun's inventory is the submit host's; the samplers saw the nodes
        inventory = {"nodes_topology": inventory["nodes_topology"]} if "nodes_topology" in inventory else {}
    topology = topology_summary(inventory) if inventory.get("topology") or inventory.get("nodes_topology") else None
    result = rows[0] if rows else None
    declared = (((record.get("plan") or {}).get("system") or {}).get("fabric_config") or {}).get(record.get("fabric"))
    fingerprint = fingerprint_of(result=result, inventory=inventory if "cpu" in inventory else None,
                                 image=(record.get("provenance") or {}).get("image_stack"),
                                 fabric=record.get("fabric"), nodes=record.get("nodes"),
                                 declared_rate_gbps=(declared or {}).get("speed_gbps"), topology=topology)
    return {**record, "fingerprint": fingerprint or None}


def rank_log_texts(run_path: Path) -> str:
    texts = []
    logs = run_path / "logs"
    if logs.is_dir():
        for path in sorted(logs.rglob("*")):
            if path.is_file():
                texts.append(path.read_text(errors="replace"))
    return "\n".join(texts)


def parse_first(texts: list[str]) -> tuple[dict[str, Any] | None, Any, str | None]:
    """(result dict, parsed, error) from the first text holding a result."""
    error = None
    for text in texts:
        try:
            parsed = parse_text(text)
            return parsed.to_dict(), parsed, None
        except ParseError as exc:
            error = str(exc)
    return None, None, error


def parse_nccl_tests(texts: list[str]) -> tuple[dict[str, Any] | None, Any, str | None]:
    """(result dict, parsed, error) of an nccl-tests run: exactly one test table in the first text that holds
    any. Several tables mean the processes ran as separate tests, not as one MPI job: an error that says so."""
    error = None
    for text in texts:
        try:
            results = parse_all(text, "nccl-tests")
        except ParseError as exc:
            error = str(exc)
            continue
        if len(results) > 1:
            ranks = sorted({result.num_devices for result in results}, key=str)
            return None, None, (f"nccl-tests printed {len(results)} separate result tables (of {ranks} rank(s) "
                                "each): its processes ran as separate tests, not as one MPI job (a build without "
                                "MPI=1, or an MPI that does not match the launcher's); refused")
        return results[0].to_dict(), results[0], None
    return None, None, error


def rank_count_refusal(parsed: ParsedResult, world_size: int, nodes: int, *, collective: bool) -> str | None:
    """Why a result cannot be the plan's: its rank count differs from nodes x ranks per node, or (when the
    log names its hosts) it ran on fewer hosts than the plan's nodes, the secretly single-node run. None when
    it fits."""
    what = f"the {parsed.collective or 'collective'} result" if collective else "the job"
    devices = parsed.num_devices
    if devices is None:
        return (f"{what} does not say how many ranks took part, but the plan has {world_size}; refused "
                "(a collective's bandwidth depends on its rank count)")
    if devices != world_size:
        return (f"{what} reported world size {devices}, but the plan has {world_size} ranks ({nodes} node(s)); "
                "refused" + (": a collective over other ranks than planned measures another thing"
                             if collective else ""))
    if collective and parsed.hosts and len(parsed.hosts) != nodes:
        return (f"{what} ran on {len(parsed.hosts)} host(s) ({', '.join(parsed.hosts)}), but the plan has "
                f"{nodes} node(s); refused: the traffic never crossed the planned fabric")
    return None


def command_result(plan: Plan, texts: list[str]) -> tuple[ParsedResult | None, str | None]:
    """A site's command's result under its contract, with which way its metric is better; a result that does
    not say how many ranks took part is the plan's (the command ran on them all)."""
    parsed, error = parse_command_output(plan.workload.result, texts)
    if parsed is None:
        return None, error
    extra = {**parsed.extra, "direction": direction(parsed.metric), "command_workload": plan.workload.name}
    ranks = plan.nodes if plan.workload.run_per == "node" else plan.world_size
    if parsed.num_devices is None:
        parsed = replace(parsed, num_devices=plan.world_size, num_ranks=ranks, extra=extra)
    return replace(parsed, extra=extra), None


def secondary_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """A training result's MFU (against the device's peak, against the measured matmul ceiling) and checkpoint
    seconds and GB/s as result rows of their own, each saying what it is; none that the run did not measure."""
    extra = result.get("extra") or {}
    rows = []
    for metric, unit in SECONDARY_METRICS.items():
        value = extra.get(metric)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
            said = {"mfu_peak": extra.get("peak_source"), "mfu_matmul": extra.get("mfu_formula"),
                    "checkpoint_seconds": "seconds of all checkpoints (barrier to barrier, slowest rank)",
                    "checkpoint_gbs": extra.get("checkpoint_gbs_formula")}[metric]
            rows.append({"metric": metric, "value": float(value), "unit": unit, "kind": result.get("kind"),
                         "value_is": str(said or metric)[:400]})
    return rows


def _iso(stamp: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stamp))


def run_row(summary: dict[str, Any], *, run_id: str, run_dir: Path, status: str, started: float, finished: float,
            provenance: dict[str, Any]) -> dict[str, Any]:
    """The store's row for a run, from its plan as recorded (`Plan.summary()`, secrets redacted)."""
    workload = summary["workload"]
    return {
        "id": run_id,
        "created_at": _iso(started),
        "finished_at": _iso(finished),
        "status": status,
        "workload": workload["name"], "model": workload.get("model"),
        "image": summary["image"]["name"], "image_digest": summary["image"].get("digest"),
        "system": summary["system"]["name"], "scheduler": summary["scheduler"], "launcher": summary["launcher"],
        "runtime": summary["runtime"], "fabric": summary["fabric"],
        "nodes": summary["nodes"], "ranks_per_node": summary["ranks_per_node"], "world_size": summary["world_size"],
        # a collective trains nothing: it has no batch size
        "batch_size": summary["batch_size"] if workload.get("kind") in (*TRAINING_KINDS, "command") else None,
        "precision": summary["precision"],
        "run_dir": str(run_dir),
        "site": local_site(), "origin": "local",  # the comparability key is computed by the store
        "plan": summary,
        "provenance": provenance,
    }


def store_and_publish(run: RunDir, store: Store, record: dict[str, Any], rows: list[dict[str, Any]]) -> Path:
    """Store the run (the store retries while other writers hold it), then move its directory into place."""
    record = with_fingerprint(record, rows, run.path)
    try:
        store.add_run(record, rows)
    except sqlite3.IntegrityError:
        if not store.has_run(record["id"]):
            raise
        # stored already: a dlrun stopped between storing and publishing; only the rename is missing
    except StoreError as exc:
        run.release()
        raise StoreError(f"{exc}; run {run.run_id} is kept in {run.path} and the next dlrun command stores "
                         "it") from None
    return run.publish()


def decide_status(plan: Plan, status: str, reason: str | None, exit_code: int | None, result_texts: list[str],
                  failure: Any) -> tuple[str, str | None, dict[str, Any] | None]:
    """(status, reason, result) from how the job ended and what it printed. `failure()` explains a failed
    job in one line (dlrun.execute.failure)."""
    if status in ("cancelled", "timeout", "lost"):
        return status, reason, None
    if exit_code == EXIT_IMPOSSIBLE and plan.workload.kind == "llm-pretraining":
        return "failed", f"impossible number (MFU above 1): {reason or failure()}", None
    if exit_code != 0:
        return "failed", reason or failure(), None
    nccl_tests = plan.workload.kind == "nccl-tests"
    if plan.workload.kind == "command":
        parsed, error = command_result(plan, result_texts)
        result = None if parsed is None else parsed.to_dict()
    else:
        reader = {"nccl-tests": parse_nccl_tests, "storage": storage_result}.get(plan.workload.kind, parse_first)
        result, parsed, error = reader(result_texts)
    if result is None:
        return "failed", f"the job exited 0 but {error}", None
    collective = parsed.metric == "busbw" if plan.workload.kind == "command" else not plan.workload.trains
    refusal = rank_count_refusal(parsed, plan.device_count, plan.nodes, collective=collective)
    if refusal:
        return "failed", refusal, result
    if (nccl_tests or plan.workload.kind == "storage") and parsed.problems:
        return "failed", f"{plan.workload.kind}: " + "; ".join(parsed.problems), result
    return "ok", None, result


def redact_run_directory(path: Path, redactor: Redactor) -> None:
    """Every file of a run directory without the run's secret values (by value, or by their fingerprints once
    dlrun no longer knows them): what its ranks printed stays in its logs and the files they wrote, which
    bundles (--with-logs) carry elsewhere. The job has ended: nothing writes them any more."""
    if not redactor.active:
        return
    for file in sorted(path.rglob("*")):
        if file.is_file() and not file.is_symlink() and file.name not in (PRINTS_NAME, LOCK_NAME):
            redactor.file(file)


#: When this process finished its last run: the next run's own start-up counts from there (reproduce's repeats).
_LAST_FINISHED: dict[str, float] = {}


def start_up(result: dict[str, Any] | None, job_started: float, dlrun_started: float | None) -> dict[str, Any] | None:
    """Where a run's time to its first step went: dlrun's own (from its start to the job's), then the job's
    (its first rank's process, framework, model and data, to its first step); None without a first step."""
    first = ((result or {}).get("extra") or {}).get("first_step_unix")
    if not isinstance(first, (int, float)) or dlrun_started is None:
        return None
    return {"dlrun_s": round(job_started - dlrun_started, 3), "job_s": round(first - job_started, 3),
            "time_to_first_step_s": round(first - dlrun_started, 3),
            "is": "seconds from dlrun's start to the job's (dlrun_s), then to rank 0's first step (job_s)"}


def finish(plan: Plan, run: RunDir, store: Store, *, status: str, reason: str | None, exit_code: int | None,
           started: float, base_provenance: dict[str, Any], result_texts: list[str], tail: list[str],
           failure: Any, extra: dict[str, Any] | None = None, signal: str | None = None) -> RunRecord:
    finished = time.time()
    status, reason, result = decide_status(plan, status, reason, exit_code, result_texts, failure)
    # What the ranks printed may hold a secret they were given (a bad port, a token in an error): one net
    # for every text of theirs that is written, stored or shown from here on.
    redactor = Redactor.known(plan_secret_values(plan))
    reason, tail, result = (None if reason is None else redactor.text(reason)), \
        [redactor.text(line) for line in tail], redactor.data(result)
    redact_run_directory(run.path, redactor)

    nccl = None
    if plan.device == "cuda":
        text = "\n".join(result_texts) + "\n" + rank_log_texts(run.path)
        ok, why, nccl = redactor.data(check_nccl_transport(plan.fabric, text, plan.nodes))
        run.write_json("nccl.json", {"fabric": plan.fabric, "ok": ok, "reason": why, **nccl})
        if not ok and status == "ok":
            status, reason = "failed", why

    extra = redactor.data({**(extra or {}), **({"signal": signal} if signal else {})})
    if plan.data is not None and plan.data.staged_copy:  # --stage-data: what each node's copy cost
        extra["data_stage"] = stage_summary(plan.data.path, plan.data.staged_copy, stage_records(run.path))
        if result is not None:
            result.setdefault("extra", {})["data_stage"] = {k: v for k, v in extra["data_stage"].items()
                                                            if k != "per_node"}
    record_hardware(plan, run, result, extra)  # telemetry summary, the nodes' topology, a collective's bound
    began = start_up(result, started, _LAST_FINISHED.get("unix") or process_started_unix())
    if began is not None:
        result["extra"]["start_up"] = began
    if result is not None:
        run.write_json("result.json", result)
    run.write_json("status.json", {"state": status, "exit_code": exit_code, "reason": reason,
                                   "started_at": started, "finished_at": finished,
                                   "duration_s": round(finished - started, 3), **extra})
    record = run_row(plan.summary(), run_id=run.run_id, run_dir=run.final, status=status, started=started,
                     finished=finished, provenance={**base_provenance, "exit_code": exit_code, "reason": reason,
                                                    **({"nccl": nccl} if nccl else {}), **extra})
    final = store_and_publish(run, store, record, [result, *secondary_rows(result)] if result and status == "ok"
                              else [])
    _LAST_FINISHED["unix"] = time.time()
    return RunRecord(id=run.run_id, path=final, status=status, exit_code=exit_code, result=result,
                     reason=reason, tail=tail[-10:], signal=signal)
