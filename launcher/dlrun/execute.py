"""Execute a rendered job on this machine, stream its output, and record the run."""
from __future__ import annotations

import hashlib
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
from dlrun.plan import Plan
from dlrun.render import HARNESS, RUN_DIR_VAR, RenderedJob
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


def _sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


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
    harness = Path(plan.image.harness_dir) / HARNESS[plan.workload.framework]
    return {
        "dlrun_git_commit": _git_commit(),
        "image": plan.image.name,
        "image_digest": plan.image.digest,
        "image_uri": plan.image.uri,
        "harness_sha256": _sha256(harness) if plan.image.kind == "host" else None,
    }


def execute_local(plan: Plan, rendered: RenderedJob, *, runs_root: Path, store: Store,
                  sink: LineSink | None = None) -> RunRecord:
    run = RunDir(runs_root, new_run_id()).create()
    try:
        run.write_json("plan.json", plan.summary())
        run.write("run.sh", rendered.script, mode=0o755)
        for name, text in rendered.files.items():
            run.write(name, text)
        env_capture = capture_environment()
        run.write_json("environment.json", env_capture)
        started = time.time()
        run.write_json("status.json", {"state": "running", "started_at": started})
    except BaseException:
        run.discard()
        raise

    env = dict(os.environ)
    env[RUN_DIR_VAR] = str(run.path)
    env["DLRUN_MASTER_PORT"] = str(free_port())
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
    finished = time.time()

    result = None
    if status != "cancelled":
        if exit_code == 0:
            try:
                parsed = parse_text((run.path / "output.log").read_text())
                result = parsed.to_dict()
                status = "ok"
                if parsed.num_devices != plan.world_size:
                    status = "failed"
                    reason = (f"the job reported world size {parsed.num_devices}, "
                              f"but the plan has {plan.world_size} ranks")
            except ParseError as exc:
                reason = f"the job exited 0 but {exc}"
        else:
            last = (tail_err or tail_out or ["(no output)"])[-1]
            reason = f"exit code {exit_code}: {last}"

    if rendered.rank_log_pattern == "logs/rank.0/stdout":
        rank_dir = run.path / "logs" / "rank.0"
        rank_dir.mkdir(parents=True, exist_ok=True)
        os.link(run.path / "output.log", rank_dir / "stdout")
        os.link(run.path / "stderr.log", rank_dir / "stderr")
    if result is not None:
        run.write_json("result.json", result)
    run.write_json("status.json", {"state": status, "exit_code": exit_code, "reason": reason,
                                   "started_at": started, "finished_at": finished,
                                   "duration_s": round(finished - started, 3)})
    final = run.publish()

    plan_data = plan.summary()
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
        "batch_size": plan.batch_size, "precision": plan.precision,
        "run_dir": str(final),
        "plan": plan_data,
        "provenance": {**provenance(plan), "hostname": env_capture["hostname"], "argv": env_capture["argv"],
                       "mpi": env_capture["mpi"], "exit_code": exit_code, "reason": reason},
    }
    rows = [result] if result and status == "ok" else []
    store.add_run(record, rows)
    return RunRecord(id=run.run_id, path=final, status=status, exit_code=exit_code, result=result,
                     reason=reason, tail=tail_err[-10:] or tail_out[-10:])
