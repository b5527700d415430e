"""The batch interface (submit, wait, collect, cancel) for PBS and LSF, driven end to end through stand-in
qsub/qstat/qdel and bsub/bjobs/bkill that run the job script on this machine (a real training run); and the
scheduler state parsers on the tools' real output formats."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from conftest import cli_json, run_cli

from dlrun.schedulers.lsf import parse_bjobs
from dlrun.schedulers.pbs import parse_qstat
from dlrun.schedulers.slurm import parse_scontrol_job

ARCH = os.uname().machine

# One script plays every tool; the job runs in the background like a real batch system would run it.
FAKE_BATCH = """#!{python}
import os, signal, subprocess, sys
tool = os.path.basename(sys.argv[0])
state = os.environ["FAKE_BATCH_STATE"]
os.makedirs(state, exist_ok=True)
def path(name): return os.path.join(state, name)
if tool in ("qsub", "bsub"):
    script = sys.argv[-1] if tool == "qsub" else path("stdin-script.sh")
    if tool == "bsub":
        open(script, "w").write(sys.stdin.read())
    env = dict(os.environ, PBS_O_WORKDIR=os.getcwd(), LS_SUBCWD=os.getcwd(), PBS_JOBID="7.server", LSB_JOBID="7")
    out = open(os.path.join(os.getcwd(), "pbs.out" if tool == "qsub" else "lsf-7.out"), "w")
    runner = "bash %s; echo $? > %s" % (subprocess.list2cmdline([script]), path("exit"))
    proc = subprocess.Popen(["bash", "-c", runner], stdout=out, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)
    open(path("pid"), "w").write(str(proc.pid))
    print("7.server" if tool == "qsub" else "Job <7> is submitted to queue <normal>.")
elif tool in ("qstat", "bjobs"):
    done = os.path.exists(path("exit"))
    code = open(path("exit")).read().strip() if done else None
    if os.path.exists(path("killed")):
        code = "271" if tool == "qstat" else "130"
    if tool == "qstat":
        print("Job Id: 7.server\\n    job_state = %s" % ("F" if done else "R"))
        if done:
            print("    Exit_status = %s" % code)
    else:
        print(("DONE -" if code == "0" else "EXIT %s" % code) if done else "RUN -")
elif tool in ("qdel", "bkill"):
    open(path("killed"), "w").write("1")
    os.killpg(int(open(path("pid")).read()), signal.SIGTERM)
"""

SYSTEM = """name: {name}
description: this machine behind a stand-in {scheduler} ({launcher})
arch: {arch}
nodes: 1
cpu: {{sockets: 1, cores_per_socket: 1}}
memory_gb: 4
fabrics: [tcp]
scheduler: {scheduler}
launcher: none
runtime: host
default_image: host
default_steps: 2
default_warmup_steps: 1
batch_sizes: {{trivial: 4}}
"""


@pytest.fixture
def fake_batch(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "fake-batch"
    fake.write_text(FAKE_BATCH.format(python=sys.executable))
    fake.chmod(0o755)
    for tool in ("qsub", "qstat", "qdel", "bsub", "bjobs", "bkill"):
        (bin_dir / tool).symlink_to(fake)
    site = tmp_path / "site" / "systems"
    site.mkdir(parents=True)
    for scheduler in ("pbs", "lsf"):
        (site / f"{scheduler}.yaml").write_text(SYSTEM.format(name=f"fake-{scheduler}", scheduler=scheduler,
                                                             launcher="none", arch=ARCH))
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "DLRUN_PATH": str(tmp_path / "site"),
            "FAKE_BATCH_STATE": str(tmp_path / "state")}


@pytest.mark.integration
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


@pytest.mark.integration
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
