"""dlrun started from inside an MPI job: a process that initialised MPI (here a real one: a Python process that
imported mpi4py, as a notebook or a workflow tool would) leaves Open MPI's job variables to its children, and
an mpirun started from them takes itself for part of that job and exits 1 without a word. The pre-launch
checks name the variables and refuse, in one line, before anything is staged."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import cli_json

from dlrun.catalog import load_catalog
from dlrun.plan import resolve_plan
from dlrun.preflight.checks import inherited_job_findings
from dlrun.probe.host import probe_host

# The parent: initialise MPI through mpi4py (a singleton: no mpirun), then start the given command from it.
PARENT = """
import subprocess, sys
from mpi4py import MPI
assert MPI.COMM_WORLD.Get_size() == 1
proc = subprocess.run(sys.argv[1:], capture_output=True, text=True)
sys.stdout.write(proc.stdout)
sys.stderr.write(proc.stderr)
sys.exit(proc.returncode)
"""


def _plan(workload: str = "trivial", **options):
    return resolve_plan(load_catalog(host=probe_host()), workload, **options)


def _from_mpi_process(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PARENT, *argv], capture_output=True, text=True, timeout=600)


def test_open_mpis_job_variables_are_named_with_a_fix():
    plan = _plan(ranks_per_node=2)
    assert plan.launcher == "mpirun"
    [finding] = inherited_job_findings(plan, {"OMPI_MCA_ess": "singleton", "PATH": "/usr/bin"})
    assert finding.level == "error" and finding.check == "inherited-job"
    assert "OMPI_MCA_ess='singleton'" in finding.message and "mpirun started from here" in finding.message
    assert finding.fix.endswith("env -u OMPI_MCA_ess dlrun ...")
    [inside_a_rank] = inherited_job_findings(plan, {"OMPI_COMM_WORLD_RANK": "0", "OMPI_MCA_ess": "^singleton"})
    assert "-u OMPI_MCA_ess -u OMPI_COMM_WORLD_RANK" in inside_a_rank.fix
    assert inherited_job_findings(plan, {"PATH": "/usr/bin", "OMPI_MCA_btl": "self,tcp"}) == []


def test_a_launcher_that_runs_no_mpirun_is_not_concerned():
    plan = _plan()
    assert plan.launcher != "mpirun" and plan.world_size == 1
    assert inherited_job_findings(plan, {"OMPI_MCA_ess": "singleton"}) == []


def test_a_batch_job_is_warned_not_refused():
    plan = _plan("resnet50", system="txgaia", nodes=2)
    assert plan.launcher == "mpirun"
    [finding] = inherited_job_findings(plan, {"OMPI_MCA_ess": "singleton"})
    assert finding.level == "warn" and "batch job that inherits" in finding.message


@pytest.mark.mpi
def test_a_run_started_from_a_process_that_initialised_mpi_is_refused_before_anything_starts(dlrun_home):
    # What the check stands on: from such a process, even a one-rank mpirun fails, and says nothing.
    bare = _from_mpi_process("mpirun", "--allow-run-as-root", "-n", "1", "true")
    assert bare.returncode != 0 and "true" not in bare.stderr
    proc = _from_mpi_process(sys.executable, "-m", "dlrun.cli", "run", "trivial", "--ranks-per-node", "2",
                             "--steps", "2", "--batch-size", "2")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    [line] = [line for line in proc.stderr.splitlines() if "OMPI_MCA_ess" in line]
    assert "OMPI_MCA_ess='singleton'" in line and "env -u OMPI_MCA_ess" in line
    assert cli_json("results", "list") == []
    runs = dlrun_home / "runs"
    assert not runs.exists() or not any(runs.iterdir()), "nothing is staged for a refused run"


@pytest.mark.mpi
def test_doctor_names_the_inherited_job(dlrun_home):
    proc = _from_mpi_process(sys.executable, "-m", "dlrun.cli", "doctor", "--launcher", "mpirun", "--json")
    checks = {check["check"]: check for check in json.loads(proc.stdout)["checks"]}
    assert checks["inherited-job"]["level"] == "error", proc.stderr
    assert "OMPI_MCA_ess" in checks["inherited-job"]["message"]
