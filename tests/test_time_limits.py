"""The one time-limit reader (issue 36, break 14): `--time 00:00:99` was accepted and Slurm got
`--time=00:01:00`, shorter than asked; `--time 99999999999999999999` rendered `1666666666666666666:39:00`.
Every field is now checked (minutes and seconds below 60, hours after days below 24), the limit is at most a
year, and every batch scheduler's limit is whole minutes rounded up, never down: checked on the rendered
directives of each scheduler, and on what the tests' real Slurm cluster records for a submitted job."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import cli_json, run_cli
from fixtures_slurm import CLUSTER_SYSTEM
from matrix_catalog import matrix_plan

from dlrun.catalog.models import SchedulerOptions
from dlrun.catalog.time_limits import MAX_TIME_LIMIT_S, time_limit_seconds
from dlrun.errors import UsageError
from dlrun.render import render_job

REFUSED = {
    "00:00:99": "99 seconds is not below 60",
    "00:99:00": "99 minutes is not below 60",
    "5:60": "60 seconds is not below 60",
    "1-24": "24 hours is not below 24",
    "1-00:60:00": "60 minutes is not below 60",
    "99999999999999999999": "more than a year",
    "366-00": "more than a year",
    "525601": "more than a year",
    "0": "a time limit of zero",
    "0-00:00:00": "a time limit of zero",
}


@pytest.mark.parametrize("value,message", sorted(REFUSED.items()))
def test_impossible_and_absurd_limits_are_one_line(dlrun_home, value, message):
    proc = run_cli("run", "trivial", "--system", "txgaia", "--time", value, "--dry-run")
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"dlrun: error: bad --time {value!r}: {message}"), proc.stderr


def test_a_systems_own_limit_is_read_the_same_way(tmp_path):
    with pytest.raises(ValueError, match="99 seconds is not below 60"):
        SchedulerOptions(time="00:00:99")


#: limit -> (seconds, the whole minutes every batch scheduler gets: rounded up)
CASES = {"1": (60, 1), "00:01:30": (90, 2), "00:00:01": (1, 1), "5:30": (330, 6), "01:02:03": (3723, 63),
         "1-02:30": (95400, 1590), "365-00:00:00": (MAX_TIME_LIMIT_S, 525600)}


def _directives(script: str) -> dict[str, str]:
    found = {}
    for pattern, name in ((r"^#SBATCH --time=(\S+)$", "slurm"), (r"^#PBS -l walltime=(\S+)$", "pbs"),
                          (r"^#BSUB -W (\S+)$", "lsf"), (r'"activeDeadlineSeconds": (\d+)', "kubernetes")):
        match = re.search(pattern, script, re.M)
        if match:
            found[name] = match.group(1)
    return found


def _minutes(name: str, value: str) -> int:
    if name == "kubernetes":
        return int(value) // 60
    if name == "lsf":
        hours, minutes = value.split(":")
        return int(hours) * 60 + int(minutes)
    hours, minutes, seconds = (int(part) for part in value.split(":"))
    assert seconds == 0
    return hours * 60 + minutes


@pytest.mark.parametrize("limit", sorted(CASES))
def test_every_batch_scheduler_gets_the_limit_rounded_up(limit):
    seconds, minutes = CASES[limit]
    assert time_limit_seconds(limit) == seconds
    seen = {}
    for scheduler, launcher in (("slurm", "srun"), ("pbs", "mpirun"), ("lsf", "jsrun"), ("kubernetes", "mpirun")):
        script = render_job(matrix_plan("host" if scheduler != "kubernetes" else "singularity", launcher, "tcp",
                                        scheduler=scheduler, time=limit)).script
        seen.update(_directives(script))
    assert set(seen) == {"slurm", "pbs", "lsf", "kubernetes"}, seen
    assert {name: _minutes(name, value) for name, value in seen.items()} == dict.fromkeys(seen, minutes)


def test_the_matrix_plan_takes_the_limit():
    with pytest.raises(UsageError, match="99 seconds is not below 60"):
        matrix_plan("host", "srun", "tcp", scheduler="slurm", time="00:00:99")


def test_slurm_records_the_limit_rounded_up(slurm_cluster, dlrun_home, tmp_path):
    """The tests' Slurm cluster gets 00:01:30 as two minutes (it would end a job at 00:01:00 otherwise)."""
    proc = run_cli("run", "trivial", "--system", CLUSTER_SYSTEM, "--time", "00:01:30", "--steps", "1",
                   "--warmup-steps", "0", env=slurm_cluster.env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [run] = cli_json("results", "list", env=slurm_cluster.env)
    job_id = json.loads((Path(run["run_dir"]) / "job.json").read_text())["job_id"]
    shown = slurm_cluster.scontrol_job(str(job_id))
    assert "TimeLimit=00:02:00" in shown, shown
