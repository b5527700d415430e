"""Running the PyTorch harness in a test: one process, or ranks under a real mpirun on this machine, each with
an environment cleared of any launcher's rank variables (shared by the harness feature and LLM tests)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

from dlrun.harness import load_harness
from dlrun.paths import HARNESS_DIR

HARNESS = HARNESS_DIR / "harness_pytorch.py"
#: Every variable the harness reads its rank from (harness_ranks.RANK_SOURCES).
RANK_VARIABLES = {key for _, rank, size, local in load_harness("pytorch", "ranks").RANK_SOURCES
                  for key in (rank, size, *local)}


def harness_env(**extra):
    env = dict(os.environ)
    for key in (*RANK_VARIABLES, "DLRUN_HARNESS_TEST_PERTURB_RANK"):
        env.pop(key, None)
    env.update({"OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}, **extra)
    return env


def free_port():
    from dlrun.execute.stage import free_port as rendezvous_port  # below the ephemeral range, as dlrun's

    return rendezvous_port()


def run_harness(args, timeout=300):
    return subprocess.run([sys.executable, str(HARNESS), *args], capture_output=True, text=True,
                          timeout=timeout, env=harness_env())


def mpirun_harness(args, extra_env=(), np=2, timeout=300):
    mpirun = shutil.which("mpirun")
    assert mpirun, "mpirun not found on PATH"
    cmd = [mpirun, "-np", str(np), "--oversubscribe", "--allow-run-as-root", "--bind-to", "none",
           "-x", "MASTER_ADDR=127.0.0.1", "-x", "MASTER_PORT=%d" % free_port(),
           "-x", "OMP_NUM_THREADS=1", "-x", "PYTHONWARNINGS=ignore"]
    for item in extra_env:
        cmd += ["-x", item]
    return subprocess.run(cmd + [sys.executable, str(HARNESS), *args], capture_output=True, text=True,
                          timeout=timeout, env=harness_env())
