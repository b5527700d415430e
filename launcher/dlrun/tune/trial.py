"""One tuning trial: the harness started as the run would start it (same image, runtime, environment, model,
batch and precision; one rank with the run's threads), timing a few variants of the knobs in alternation
(`harness_pytorch_tune.py`). Per process: the allocator and thread pinning (settled before torch loads);
within the process: everything else.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dlrun.errors import DlrunError
from dlrun.harness.harness_contract import TUNE_TRIAL_ENV
from dlrun.execute.procs import kept
from dlrun.execute.stage import free_port
from dlrun.job import RUN_DIR_VAR
from dlrun.files import remove_orphans, try_lock
from dlrun.paths import TUNE_TRIALS, dlrun_home, private_dir
from dlrun.plan import Plan, variant
from dlrun.render import render_job
from dlrun.secrets import plan_secret_values, redact_text

TRIAL_LOCK = ".dlrun.lock"
MARKER = "DLRUN_TUNE "
#: How long one trial process may take before it is ended (a ResNet-50 warm-up on a busy 2-core node takes
#: minutes; torch.compile more).
TRIAL_TIMEOUT_S = 1800


class TrialFailed(DlrunError):
    """A trial process failed: its variant cannot run here (an allocator the image lacks, ...)."""


def trial_plan(plan: Plan, spec: Mapping[str, Any], process_knobs: Mapping[str, str]) -> Plan:
    """The run's plan as one rank of a trial: synthetic data, no telemetry, the process's allocator and pinning,
    and the variants to time in the harness's environment."""
    return variant(plan, **{
        "nodes": 1, "ranks_per_node": 1, "launcher": "none", "data": None, "data_workers": 0,
        "telemetry_period": None, "steps": 1, "warmup_steps": 0, "dist": "ddp" if plan.dist else plan.dist,
        "allocator": process_knobs.get("allocator", plan.allocator),
        "pin_threads": process_knobs.get("pin_threads", plan.pin_threads),
        "env": {**plan.env, TUNE_TRIAL_ENV: json.dumps(dict(spec), sort_keys=True)}})


def run_trial(plan: Plan, spec: Mapping[str, Any], process_knobs: Mapping[str, str],
              timeout_s: float = TRIAL_TIMEOUT_S) -> dict[str, Any]:
    """Run one trial process; its DLRUN_TUNE record. TrialFailed with the process's last words otherwise."""
    rendered = render_job(trial_plan(plan, spec, process_knobs))
    root = private_dir(dlrun_home() / TUNE_TRIALS)
    remove_orphans(root, "trial-*", TRIAL_LOCK)  # what a tune killed before it could clean up left
    work = Path(tempfile.mkdtemp(prefix="trial-", dir=root))
    # The folder's lock is held by this process and, inherited, by the trial's: it is free (and the next
    # dlrun removes the folder) only once both are gone, however they ended.
    lock = try_lock(work / TRIAL_LOCK)
    try:
        (work / "run.sh").write_text(rendered.script)
        env = {**os.environ, RUN_DIR_VAR: str(work), "DLRUN_MASTER_PORT": str(free_port())}
        env.update({name: plan.env[name] for name in plan.secret_names})
        proc = subprocess.Popen(kept(rendered.submit_argv), cwd=work, env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True, pass_fds=() if lock is None else (lock,))
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except BaseException:  # the time limit, or Ctrl-C: end the trial's whole session
            _end(proc)
            raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if lock is not None:
            os.close(lock)
    for line in reversed(out.splitlines()):
        if line.startswith(MARKER):
            return json.loads(line[len(MARKER):])
    last = (err.strip().splitlines() or out.strip().splitlines() or ["no output"])[-1]
    last = redact_text(last, plan_secret_values(plan))  # a rank's words may hold a secret it was given
    raise TrialFailed(f"tuning trial ({_label(process_knobs)}) exited {proc.returncode}: {last[-300:]}")


def _label(process_knobs: Mapping[str, str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(process_knobs.items())) or "defaults"


def _end(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.wait()
