"""The telemetry sampler of a local run: started before the job, stopped after it however it ended (the
job's own processes are found by the run directory in their environment; the sampler's environment lacks it,
so ending the job never cuts its series short). A sampler that does not stop within its grace is killed; one
that outlives dlrun stops by itself (it watches its parent)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dlrun.job import RUN_DIR_VAR
from dlrun.plan import Plan
from dlrun.telemetry.launch import SAMPLER_FILES, local_sampler_argv

STOP_GRACE_S = 10.0


def start_sampler(plan: Plan, run_path: Path) -> subprocess.Popen | None:
    """The sampler for a local run, or None when telemetry is off (or the run directory has no sampler)."""
    if not plan.telemetry_period or not (run_path / SAMPLER_FILES[0]).is_file():
        return None
    env = {name: value for name, value in os.environ.items() if name != RUN_DIR_VAR}
    try:
        private = os.open(run_path / "telemetry-sampler.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with open(private, "wb") as log:  # private as every file of the run directory
            return subprocess.Popen(local_sampler_argv(sys.executable, run_path, plan.telemetry_period),
                                    cwd=run_path, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                    start_new_session=True)
    except OSError:  # the run goes on without telemetry; its summary says there is none
        return None


def stop_sampler(proc: subprocess.Popen | None) -> None:
    """SIGTERM (the sampler takes a last sample and writes its end line), SIGKILL after the grace."""
    if proc is None:
        return
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextmanager
def sampling(plan: Plan, run_path: Path) -> Iterator[subprocess.Popen | None]:
    proc = start_sampler(plan, run_path)
    try:
        yield proc
    finally:
        stop_sampler(proc)
