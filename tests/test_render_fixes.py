"""Rendered jobs that would have failed on the real machine: the rendezvous address must be the host where
rank 0 runs (the first compute host) under LSF, PBS and Slurm; option values starting with `-` must not
reach a directive; the host runtime gives the workload the host path of a bind. The shell lines that find
the address are executed with the scheduler's host files as the tools' documentation describes them."""
from __future__ import annotations

import re
import subprocess

import pytest
from conftest import run_cli
from matrix_catalog import matrix_plan
from pydantic import ValidationError

from dlrun.catalog.models import SchedulerOptions
from dlrun.job import RankCommand
from dlrun.registry import RUNTIMES
from dlrun.render import render_job
from dlrun.schedulers.slurm import SlurmOptions
from dlrun.shell import Expand


def _master_and_hosts(script: str, env: dict[str, str]) -> tuple[str, str | None]:
    """Run the script's DLRUN_MASTER_ADDR and DLRUN_HOSTS lines as the job would."""
    lines = [line for line in script.splitlines() if line.startswith(("DLRUN_MASTER_ADDR=", "DLRUN_HOSTS="))]
    program = "\n".join(lines) + '\nprintf "%s\\n%s\\n" "$DLRUN_MASTER_ADDR" "${DLRUN_HOSTS:-}"\n'
    out = subprocess.run(["bash", "-c", program], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", **env},
                         check=True).stdout.split("\n")
    return out[0], out[1] or None


def test_lsf_with_jsrun_skips_the_launch_node(tmp_path):
    """Under LSF with CSM (jsrun), the batch script runs on a launch node that appears first in
    LSB_DJOB_HOSTFILE and runs no rank; rank 0 is on the first compute host after it."""
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("batch3\n" + "a01n05\n" * 42 + "a01n02\n" * 42)
    script = render_job(matrix_plan("singularity", "jsrun", "ib", scheduler="lsf")).script
    assert _master_and_hosts(script, {"LSB_DJOB_HOSTFILE": str(hostfile)}) == ("a01n05", None)


def test_lsf_with_mpirun_uses_the_allocation_order(tmp_path):
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("h09\nh09\nh02\nh02\n")  # the script runs on h09, the first execution host
    script = render_job(matrix_plan("host", "mpirun", "tcp", scheduler="lsf")).script
    assert _master_and_hosts(script, {"LSB_DJOB_HOSTFILE": str(hostfile)}) == ("h09", "h09:2,h02:2")


def test_pbs_rank_0_and_the_rendezvous_are_the_node_files_first_host(tmp_path):
    """mpiexec -H puts rank 0 on the first host given; `sort -u` put n01 first though the job runs on n03."""
    nodefile = tmp_path / "nodefile"
    nodefile.write_text("n03\nn03\nn01\nn01\n")
    script = render_job(matrix_plan("host", "mpirun", "tcp", scheduler="pbs")).script
    assert _master_and_hosts(script, {"PBS_NODEFILE": str(nodefile)}) == ("n03", "n03:2,n01:2")


def test_slurm_rendezvous_is_the_batch_host_which_is_the_first_node():
    for launcher in ("srun", "mpirun", "torchrun"):
        script = render_job(matrix_plan("host", launcher, "tcp", scheduler="slurm")).script
        assert "DLRUN_MASTER_ADDR=$(hostname)\n" in script, launcher
    host = subprocess.run(["hostname"], capture_output=True, text=True).stdout.strip()
    assert _master_and_hosts(script, {})[0] == host


def test_single_node_jobs_need_no_rendezvous_host():
    script = render_job(matrix_plan("host", "mpirun", "tcp", scheduler="pbs", nodes=1)).script
    assert "DLRUN_MASTER_ADDR" not in script and "MASTER_ADDR=127.0.0.1" in script


@pytest.mark.parametrize("field", ["partition", "account", "qos", "constraint", "reservation"])
def test_directive_values_cannot_start_with_a_dash(field):
    with pytest.raises(ValidationError, match="String should match pattern"):
        SlurmOptions(**{field: "-x"})
    assert getattr(SlurmOptions(**{field: "gpu-large"}), field) == "gpu-large"


@pytest.mark.parametrize("option,system,directive", [("--partition", "ac922", "#BSUB"),
                                                      ("--account", "prace-1080ti", "#PBS")])
def test_cli_refuses_a_leading_dash_in_one_line(dlrun_home, option, system, directive):
    proc = run_cli("run", "resnet50", "--system", system, f"{option}=-x", "--dry-run", "--skip-checks")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == (f"dlrun: error: bad {option} '-x'; valid: letters, digits and _ . , : + = @ % / -, "
                                   "not starting with -")
    ok = run_cli("run", "resnet50", "--system", system, f"{option}=x-1", "--dry-run", "--skip-checks")
    assert ok.returncode == 0 and re.search(rf"^{directive} -[qA] x-1$", ok.stdout, re.M)


def test_time_limits_in_seconds():
    cases = {"1": 60, "90": 5400, "5:30": 330, "01:02:03": 3723, "2-0": 172800, "1-02:30": 95400,
             "1-00:00:10": 86410}
    assert {t: SchedulerOptions(time=t).time_seconds() for t in cases} == cases
    assert SchedulerOptions(time=None).time_seconds() is None


def test_host_runtime_gives_the_workload_the_host_paths(dlrun_home, tmp_path):
    data = tmp_path / "imagenet"
    out = tmp_path / "out dir"
    data.mkdir()
    plan = matrix_plan("host", "mpirun", "tcp", bind=[f"{out}:/out:rw"], data=str(data))
    rank = RankCommand(argv=["python3", "bench.py", "--data_dir=/data", "/data/train", "--out", "/out",
                             "/database", Expand("${DLRUN_RUN_DIR}/data")],
                       env={"DATA": "/data/val", "OTHER": "/opt/x", "PORT": Expand("${DLRUN_MASTER_PORT}")})
    wrapped = RUNTIMES.get("host").wrap(plan, rank)
    assert wrapped.argv == ["python3", "bench.py", f"--data_dir={data}", f"{data}/train", "--out", str(out),
                            "/database", "${DLRUN_RUN_DIR}/data"]
    assert isinstance(wrapped.argv[-1], Expand)
    assert wrapped.env == {"DATA": f"{data}/val", "OTHER": "/opt/x", "PORT": "${DLRUN_MASTER_PORT}"}
    assert RUNTIMES.get("host").wrap(matrix_plan("host", "mpirun", "tcp"), rank) == rank  # no binds: unchanged
