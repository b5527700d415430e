"""Running a job on this machine: the job's process group, its output streamed and logged."""
from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from dlrun.execute.record import RunRecord, finish
from dlrun.execute.stage import job_env, stage
from dlrun.job import RenderedJob
from dlrun.plan import Plan
from dlrun.results.store import Store

LineSink = Callable[[str, str], None]  # (stream name, line)


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


def execute_local(plan: Plan, rendered: RenderedJob, *, runs_root: Path, store: Store,
                  sink: LineSink | None = None, inventory: dict[str, Any] | None = None,
                  findings: list[Any] | None = None) -> RunRecord:
    run, env_capture, started = stage(plan, rendered, runs_root, inventory, findings)
    env = job_env(run)
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
    return finish(plan, rendered, run, store, status=status, reason=reason, exit_code=exit_code,
                   started=started, env_capture=env_capture,
                   result_texts=[(run.path / "output.log").read_text(errors="replace")],
                   tail=tail_err or tail_out)
