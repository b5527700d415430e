"""Staging a run: its directory (under a hidden name until it ends), the files that describe it, and the
environment the job starts with."""
from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Any

from dlrun.errors import DlrunError
from dlrun.execute.envcapture import capture_environment
from dlrun.execute.rundir import RunDir, new_run_id
from dlrun.job import RUN_DIR_VAR, RenderedJob
from dlrun.plan import Plan
from dlrun.preflight import findings_json, node_inventory
from dlrun.registry import RUNTIMES


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# Runtimes whose bind syntax cannot carry ',' or ':' in the run directory's path.
def stage(plan: Plan, rendered: RenderedJob, runs_root: Path, inventory: dict[str, Any] | None,
          findings: list[Any] | None) -> tuple[RunDir, dict[str, Any], float]:
    forbidden = RUNTIMES.get(plan.runtime).bind_forbidden  # the run directory is bound into the container
    if any(ch in str(runs_root) for ch in forbidden):
        chars = " or ".join(repr(ch) for ch in forbidden)
        raise DlrunError(f"the run directory {str(runs_root)!r} contains {chars}, which runtime {plan.runtime} "
                         "cannot bind; set DLRUN_HOME to a path without them", exit_code=2)
    if inventory is None:
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
            run.write_json("preflight.json", findings_json(findings))
        started = time.time()
        run.write_json("status.json", {"state": "running", "started_at": started})
    except BaseException:
        run.discard()
        raise
    return run, env_capture, started


def job_env(run: RunDir) -> dict[str, str]:
    env = dict(os.environ)
    env[RUN_DIR_VAR] = str(run.path)
    env["DLRUN_MASTER_PORT"] = str(free_port())
    return env
