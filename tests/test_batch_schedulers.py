"""The batch interface (submit, wait, collect, cancel) for PBS and LSF, driven end to end through stand-in
qsub/qstat/qdel and bsub/bjobs/bkill that run the job script on this machine (a real training run); and the
scheduler state parsers on the tools' real output formats."""
from __future__ import annotations

import json
import os
from pathlib import Path

import fake_batch as fake_batch_tools
import pytest
from conftest import cli_json, run_cli

from dlrun.schedulers.lsf import parse_bjobs
from dlrun.schedulers.pbs import parse_qstat
from dlrun.schedulers.slurm import parse_scontrol_job

ARCH = os.uname().machine


@pytest.fixture
def fake_batch(tmp_path):
    """Stand-in qsub/qstat/qdel and bsub/bjobs/bkill (tests/fake_batch.py) and systems fake-pbs, fake-lsf."""
    return fake_batch_tools.install(tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("scheduler,output", [("pbs", "pbs.out"), ("lsf", "lsf-7.out")])
def test_submit_wait_collect_through_pbs_and_lsf(dlrun_home, fake_batch, scheduler, output):
    proc = run_cli("run", "trivial", "--system", f"fake-{scheduler}", env=fake_batch, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"submitted {scheduler} job 7" in proc.stderr
    run = cli_json("results", "list", env=fake_batch)[0]
    assert (run["status"], run["scheduler"], run["world_size"]) == ("ok", scheduler, 1)
    run_dir = Path(run["run_dir"])
    assert json.loads((run_dir / "job.json").read_text())["job_id"] in ("7", "7.server")
    assert "DLRUN_RESULT" in (run_dir / output).read_text()
    assert (run_dir / "output.log").read_text() == (run_dir / output).read_text()
    assert json.loads((run_dir / "status.json").read_text())["job_state"] in ("F", "DONE")


@pytest.mark.slow
def test_failed_batch_job_is_recorded_failed(dlrun_home, fake_batch, tmp_path):
    images = tmp_path / "site" / "images"
    images.mkdir()
    (images / "broken.yaml").write_text(f"name: broken\ndescription: fails\nkind: host\narch: [{ARCH}]\n"
                                        "python: /bin/false\nharness_dir: /nonexistent\n")
    proc = run_cli("run", "trivial", "--system", "fake-lsf", "--image", "broken", env=fake_batch)
    assert proc.returncode == 1
    run = cli_json("results", "list", env=fake_batch)[0]
    assert run["status"] == "failed"
    assert "lsf job 7 EXIT: exit code 1: (no output)" == json.loads((Path(run["run_dir"]) / "status.json"
                                                                     ).read_text())["reason"]


SCONTROL_DONE = ("JobId=12 JobName=dlrun-trivial UserId=root(0) JobState=COMPLETED Reason=None Dependency=(null) "
                 "Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:09")


def test_state_parsers():
    assert parse_scontrol_job(SCONTROL_DONE).state == "completed"
    assert parse_scontrol_job(SCONTROL_DONE).exit_code == 0
    failed = parse_scontrol_job("JobState=FAILED Reason=NonZeroExitCode ExitCode=143:0")
    assert (failed.state, failed.exit_code, failed.reason) == ("failed", 143, "NonZeroExitCode")
    assert parse_scontrol_job("JobState=CANCELLED Reason=None ExitCode=0:15").exit_code == 143
    assert parse_scontrol_job("JobState=TIMEOUT Reason=TimeLimit ExitCode=0:0").state == "timeout"
    assert parse_scontrol_job("JobState=PENDING Reason=Resources ExitCode=0:0").state == "pending"
    assert parse_scontrol_job("JobState=CANCELLED+ Reason=None ExitCode=0:0").state == "cancelled"
    assert parse_qstat("Job Id: 7.pbs\n    job_state = R\n").state == "running"
    assert parse_qstat("job_state = F\n    Exit_status = 0\n").state == "completed"
    assert parse_qstat("job_state = F\n    Exit_status = 271\n").state == "cancelled"
    assert parse_qstat("job_state = F\n    Exit_status = 3\n").state == "failed"
    assert parse_bjobs("DONE -\n").state == "completed" and parse_bjobs("DONE -\n").exit_code == 0
    assert (parse_bjobs("EXIT 1\n").state, parse_bjobs("EXIT 1\n").exit_code) == ("failed", 1)
    assert parse_bjobs("PEND -\n").state == "pending"
