"""Execute a rendered job on this machine, stream its output, and record the run."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from dlrun.envcapture import capture_environment
from dlrun.errors import DlrunError
from dlrun.plan import Plan
from dlrun.paths import harness_hashes
from dlrun.render import RUN_DIR_VAR, RenderedJob
from dlrun.results.parse import ParseError, parse_text
from dlrun.results.store import Store
from dlrun.rundir import RunDir, new_run_id

LineSink = Callable[[str, str], None]  # (stream name, line)


@dataclass
class RunRecord:
    id: str
    path: Path
    status: str  # ok | failed | cancelled
    exit_code: int | None
    result: dict[str, Any] | None = None
    reason: str | None = None
    tail: list[str] = field(default_factory=list)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _git_commit() -> str | None:
    from dlrun.catalog.loader import REPO_ROOT

    if not (REPO_ROOT / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=10)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _pump(stream: IO[str], name: str, log: Path, sink: LineSink | None, tail: list[str]) -> None:
    with open(log, "w") as out:
        for line in stream:
            out.write(line)
            out.flush()
            tail.append(line.rstrip("\n"))
            del tail[:-40]
            if sink:
                sink(name, line.rstrip("\n"))


def _stop(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """Ask the whole process group to stop (SIGINT, then SIGTERM, then SIGKILL)."""
    for sig, wait in ((signal.SIGINT, grace), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def provenance(plan: Plan) -> dict[str, Any]:
    from dlrun.images.verify import image_provenance

    # A container's harness files are hashed when its image is built (the image lock); the host runs them
    # from this machine, so they are hashed here.
    digest, per_file = (harness_hashes(Path(plan.image.harness_dir), plan.workload.framework)
                        if plan.image.kind == "host" else (None, None))
    return {
        "dlrun_git_commit": _git_commit(),
        "image": plan.image.name,
        "image_digest": plan.image.digest,
        "image_uri": plan.image.uri,
        "harness_sha256": digest,
        "harness_files_sha256": per_file,
        **image_provenance(plan),  # the pre-run digest check of the image the runtime used
    }


def execute(plan: Plan, rendered: RenderedJob, *, runs_root: Path, store: Store, sink: LineSink | None = None,
            inventory: dict[str, Any] | None = None, findings: list[Any] | None = None,
            poll_interval: float = 2.0) -> RunRecord:
    """Run the job the way its scheduler runs jobs: locally, or submitted and waited for."""
    from dlrun.registry import SCHEDULERS

    scheduler = SCHEDULERS.get(plan.scheduler)
    if scheduler.batch:
        return execute_batch(plan, rendered, runs_root=runs_root, store=store, sink=sink, inventory=inventory,
                             findings=findings, poll_interval=poll_interval)
    return execute_local(plan, rendered, runs_root=runs_root, store=store, sink=sink, inventory=inventory,
                         findings=findings)


# Runtimes whose bind syntax cannot carry ',' or ':' in the run directory's path.
BIND_SYNTAX_RUNTIMES = ("singularity", "apptainer", "enroot")


def _stage(plan: Plan, rendered: RenderedJob, runs_root: Path, inventory: dict[str, Any] | None,
           findings: list[Any] | None) -> tuple[RunDir, dict[str, Any], float]:
    if plan.runtime in BIND_SYNTAX_RUNTIMES and any(ch in str(runs_root) for ch in ",:"):
        raise DlrunError(f"the run directory {str(runs_root)!r} contains ',' or ':', which runtime {plan.runtime} "
                         "cannot bind; set DLRUN_HOME to a path without them", exit_code=2)
    if inventory is None:
        from dlrun.doctor import node_inventory

        inventory = node_inventory()
    run = RunDir(runs_root, new_run_id()).create()
    try:
        run.write_json("plan.json", plan.summary())
        run.write("run.sh", rendered.script, mode=0o755)
        for name, text in rendered.files.items():
            run.write(name, text)
        env_capture = capture_environment()
        run.write_json("environment.json", env_capture)
        run.write_json("inventory.json", inventory)
        if findings is not None:
            from dlrun.doctor import findings_json

            run.write_json("preflight.json", findings_json(findings))
        started = time.time()
        run.write_json("status.json", {"state": "running", "started_at": started})
    except BaseException:
        run.discard()
        raise
    return run, env_capture, started


def _job_env(run: RunDir) -> dict[str, str]:
    env = dict(os.environ)
    env[RUN_DIR_VAR] = str(run.path)
    env["DLRUN_MASTER_PORT"] = str(free_port())
    return env


def _rank_log_texts(run_path: Path) -> str:
    texts = []
    logs = run_path / "logs"
    if logs.is_dir():
        for path in sorted(logs.rglob("*")):
            if path.is_file():
                texts.append(path.read_text(errors="replace"))
    return "\n".join(texts)


def _parse_first(texts: list[str]) -> tuple[dict[str, Any] | None, Any, str | None]:
    """(result dict, parsed, error) from the first text holding a result."""
    error = None
    for text in texts:
        try:
            parsed = parse_text(text)
            return parsed.to_dict(), parsed, None
        except ParseError as exc:
            error = str(exc)
    return None, None, error


def _finish(plan: Plan, rendered: RenderedJob, run: RunDir, store: Store, *, status: str, reason: str | None,
            exit_code: int | None, started: float, env_capture: dict[str, Any], result_texts: list[str],
            tail: list[str], extra: dict[str, Any] | None = None) -> RunRecord:
    finished = time.time()
    result = None
    if status not in ("cancelled",):
        if exit_code == 0:
            result, parsed, error = _parse_first(result_texts)
            if result is not None:
                status = "ok"
                if parsed.num_devices != plan.world_size:
                    status = "failed"
                    reason = (f"the job reported world size {parsed.num_devices}, "
                              f"but the plan has {plan.world_size} ranks")
            else:
                status, reason = "failed", f"the job exited 0 but {error}"
        elif reason is None:
            last = (tail or ["(no output)"])[-1]
            status, reason = "failed", f"exit code {exit_code}: {last}"

    nccl = None
    if plan.device == "cuda":
        from dlrun.fabrics import check_nccl_transport

        text = "\n".join(result_texts) + "\n" + _rank_log_texts(run.path)
        ok, why, nccl = check_nccl_transport(plan.fabric, text, plan.nodes)
        run.write_json("nccl.json", {"fabric": plan.fabric, "ok": ok, "reason": why, **nccl})
        if not ok and status == "ok":
            status, reason = "failed", why

    if result is not None:
        run.write_json("result.json", result)
    run.write_json("status.json", {"state": status, "exit_code": exit_code, "reason": reason,
                                   "started_at": started, "finished_at": finished,
                                   "duration_s": round(finished - started, 3), **(extra or {})})
    final = run.publish()

    record = {
        "id": run.run_id,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(finished)),
        "status": status,
        "workload": plan.workload.name, "model": plan.workload.model,
        "image": plan.image.name, "image_digest": plan.image.digest,
        "system": plan.system.name, "scheduler": plan.scheduler, "launcher": plan.launcher,
        "runtime": plan.runtime, "fabric": plan.fabric,
        "nodes": plan.nodes, "ranks_per_node": plan.ranks_per_node, "world_size": plan.world_size,
        "batch_size": None if plan.workload.kind == "allreduce" else plan.batch_size,  # allreduce trains nothing
        "precision": plan.precision,
        "run_dir": str(final),
        "plan": plan.summary(),
        "provenance": {**provenance(plan), "hostname": env_capture["hostname"], "argv": env_capture["argv"],
                       "mpi": env_capture["mpi"], "exit_code": exit_code, "reason": reason,
                       **({"nccl": nccl} if nccl else {}), **(extra or {})},
    }
    rows = [result] if result and status == "ok" else []
    store.add_run(record, rows)
    return RunRecord(id=run.run_id, path=final, status=status, exit_code=exit_code, result=result,
                     reason=reason, tail=tail[-10:])


def execute_local(plan: Plan, rendered: RenderedJob, *, runs_root: Path, store: Store,
                  sink: LineSink | None = None, inventory: dict[str, Any] | None = None,
                  findings: list[Any] | None = None) -> RunRecord:
    run, env_capture, started = _stage(plan, rendered, runs_root, inventory, findings)
    env = _job_env(run)
    tail_out: list[str] = []
    tail_err: list[str] = []
    status, reason, exit_code = "failed", None, None
    proc = subprocess.Popen(rendered.submit_argv, cwd=run.path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, bufsize=1, start_new_session=True)
    pumps = [threading.Thread(target=_pump, args=(proc.stdout, "stdout", run.path / "output.log", sink, tail_out)),
             threading.Thread(target=_pump, args=(proc.stderr, "stderr", run.path / "stderr.log", sink, tail_err))]
    for pump in pumps:
        pump.start()
    try:
        exit_code = proc.wait()
    except KeyboardInterrupt:
        _stop(proc)
        exit_code = proc.returncode
        status, reason = "cancelled", "interrupted by the user (SIGINT)"
    for pump in pumps:
        pump.join()

    if rendered.rank_log_pattern == "logs/rank.0/stdout":
        rank_dir = run.path / "logs" / "rank.0"
        rank_dir.mkdir(parents=True, exist_ok=True)
        os.link(run.path / "output.log", rank_dir / "stdout")
        os.link(run.path / "stderr.log", rank_dir / "stderr")
    return _finish(plan, rendered, run, store, status=status, reason=reason, exit_code=exit_code,
                   started=started, env_capture=env_capture,
                   result_texts=[(run.path / "output.log").read_text(errors="replace")],
                   tail=tail_err or tail_out)


class _Follower:
    """Streams new lines of growing files to the sink (the job's output, rank 0's log)."""

    def __init__(self, sink: LineSink | None):
        self.sink = sink
        self.offsets: dict[Path, int] = {}
        self.partial: dict[Path, str] = {}

    def poll(self, paths: list[Path], final: bool = False) -> None:
        for path in paths:
            try:
                with open(path, errors="replace") as handle:
                    handle.seek(self.offsets.get(path, 0))
                    chunk = handle.read()
                    self.offsets[path] = handle.tell()
            except OSError:
                continue
            text = self.partial.pop(path, "") + chunk
            lines = text.split("\n")
            if not final:
                self.partial[path] = lines.pop()
            for line in lines:
                if line and self.sink:
                    self.sink("stdout", line)


def _tail_lines(paths: list[Path], count: int = 40) -> list[str]:
    lines: list[str] = []
    for path in paths:
        try:
            lines += [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
        except OSError:
            continue
    return lines[-count:]


def execute_batch(plan: Plan, rendered: RenderedJob, *, runs_root: Path, store: Store, sink: LineSink | None = None,
                  inventory: dict[str, Any] | None = None, findings: list[Any] | None = None,
                  poll_interval: float = 2.0, cancel_grace: float = 120.0) -> RunRecord:
    """Submit to a batch scheduler, follow the job until it ends, collect its logs, record the run.
    SIGINT (KeyboardInterrupt) cancels the job and records the run as cancelled."""
    from dlrun.registry import SCHEDULERS
    from dlrun.schedulers.base import JobState, SchedulerError

    scheduler = SCHEDULERS.get(plan.scheduler)
    run, env_capture, started = _stage(plan, rendered, runs_root, inventory, findings)
    env = _job_env(run)
    try:
        job_id = scheduler.submit(rendered, run.path, env)
    except (SchedulerError, OSError) as exc:
        return _finish(plan, rendered, run, store, status="failed", reason=f"submission failed: {exc}",
                       exit_code=None, started=started, env_capture=env_capture, result_texts=[], tail=[])
    run.write_json("job.json", {"scheduler": plan.scheduler, "job_id": job_id, "submitted_at": time.time()})
    if sink:
        sink("stderr", f"dlrun: submitted {plan.scheduler} job {job_id} (run directory {run.path})")

    follower = _Follower(sink)
    rank0 = run.path / rendered.rank_log_pattern.format(rank=0)

    def followed() -> list[Path]:
        paths = scheduler.output_files(job_id, run.path)
        return paths + ([rank0] if rank0 not in paths and plan.launcher == "srun" else [])

    status, reason = "failed", None
    state = JobState(state="unknown")
    interval = min(0.5, poll_interval)
    try:
        while True:
            state = scheduler.poll(job_id, run.path)
            follower.poll(followed())
            if state.done or state.state == "unknown":
                break
            time.sleep(interval)
            interval = min(interval * 1.5, poll_interval)
    except KeyboardInterrupt:
        status, reason = "cancelled", f"interrupted by the user (SIGINT); {plan.scheduler} job {job_id} cancelled"
        deadline = time.time() + cancel_grace
        try:
            scheduler.cancel(job_id)
            while time.time() < deadline:  # until the scheduler has really ended it (files closed)
                try:
                    state = scheduler.poll(job_id, run.path)
                except SchedulerError:
                    break
                if state.done or state.state == "unknown":
                    break
                time.sleep(0.5)
        except KeyboardInterrupt:  # a second Ctrl-C: record what we have, do not leave a staging directory
            scheduler.cancel(job_id)
    except SchedulerError as exc:
        reason = f"lost track of {plan.scheduler} job {job_id}: {exc}"
    follower.poll(followed(), final=True)

    outputs = scheduler.output_files(job_id, run.path)
    job_text = "\n".join(p.read_text(errors="replace") for p in outputs if p.is_file())
    run.write("output.log", job_text)
    rank0_text = rank0.read_text(errors="replace") if rank0.is_file() else ""
    exit_code = state.exit_code
    if status != "cancelled":
        if state.state == "cancelled":
            status, reason = "cancelled", f"{plan.scheduler} job {job_id} was cancelled ({state.raw})"
        elif state.state == "timeout":
            reason = (f"{plan.scheduler} job {job_id} hit its time limit "
                      f"({plan.scheduler_options.time}); see the rank logs")
        elif state.state == "unknown" and exit_code is None:
            exit_code = 0 if _parse_first([job_text, rank0_text])[0] else None
            reason = None if exit_code == 0 else f"{plan.scheduler} no longer knows job {job_id}"
        elif exit_code not in (0, None) or state.state == "failed":
            last = (_tail_lines([*outputs, run.path / rendered.rank_log_pattern.format(rank=0).replace(
                "stdout", "stderr")]) or ["(no output)"])[-1]
            reason = f"{plan.scheduler} job {job_id} {state.raw or state.state} (exit code {exit_code}): {last}"
    tail = _tail_lines([*outputs, rank0])
    return _finish(plan, rendered, run, store, status=status, reason=reason, exit_code=exit_code, started=started,
                   env_capture=env_capture, result_texts=[job_text, rank0_text], tail=tail,
                   extra={"job_id": job_id, "job_state": state.raw or state.state})
