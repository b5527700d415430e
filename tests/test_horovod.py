"""Horovod for real: `--dist horovod` plans and renders (PRACE trains with Horovod by default, as its guide did),
refuses images without Horovod, and really trains on two ranks under mpirun and under horovodrun with the same
result contract as DistributedDataParallel; a rank that does not average is caught by the replica check.

Horovod is built from its source release by `make horovod` (scripts/build-horovod.sh), which `make test` runs."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import cli_json, run_cli
from golden_files import GOLDEN as GOLDEN_ROOT, assert_golden

from dlrun.catalog import load_catalog
from dlrun.paths import HARNESS_DIR
from dlrun.plan import resolve_plan
from dlrun.probe.host import probe_host
from dlrun.render import render_job

GOLDEN = GOLDEN_ROOT / "systems"
FIXED_HOME = "/nonexistent/dlrun-home"
MPIRUN_ROOT_OK = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
TINY = ["--steps", "2", "--warmup-steps", "1", "--batch-size", "2", "--ranks-per-node", "2"]


@pytest.fixture
def fixed_home(monkeypatch):
    monkeypatch.setenv("DLRUN_HOME", FIXED_HOME)
    monkeypatch.setenv("XDG_CONFIG_HOME", "/nonexistent/xdg-config")
    monkeypatch.delenv("DLRUN_PATH", raising=False)
    monkeypatch.setattr("dlrun.plan.jobuser.effective_uid", lambda: 1000)  # a site's user, not root


def _prace_plan(**options):
    from dlrun.images.verify import with_local_image

    return resolve_plan(load_catalog(host=probe_host()), "resnet50", system="prace-1080ti", nodes=2,
                        local_image=with_local_image, **options)


# ------------------------------------------------------------------------------------ plan and render
def test_prace_trains_with_horovod_by_default_golden(fixed_home):
    plan = _prace_plan()
    assert plan.dist == "horovod" and plan.image.name == "pytorch1.0-horovod"
    assert any(s.about == "dist" and "Horovod as a distribution layer" in (s.note or "") for s in plan.system.sources)
    script = render_job(plan).script
    assert_golden(GOLDEN / "prace-1080ti.sh", script, what="the PRACE script", shell=False)
    last = script.strip().splitlines()[-1]
    assert last.startswith("mpiexec -np 8 ") and last.endswith("--dist horovod --timeout-s 1800 --device cuda --expected-world-size 8")
    # --dist ddp still renders the DistributedDataParallel harness there, and says so in the plan.
    ddp = _prace_plan(dist="ddp")
    assert ddp.dist == "ddp" and "--dist" not in render_job(ddp).script
    assert _prace_plan(launcher="horovodrun").dist == "horovod"


def _plan_json(*args: str) -> dict:
    return json.loads(run_cli("plan", *args, check=True).stdout)


def test_dist_in_plan_json_and_defaults(dlrun_home):
    assert _plan_json("trivial", "--ranks-per-node", "2")["dist"] == "ddp"
    assert _plan_json("trivial", "--image", "pytorch1.0-horovod", "--dist", "horovod")["dist"] == "horovod"
    assert _plan_json("resnet50", "--system", "prace-1080ti")["dist"] == "horovod"
    assert _plan_json("allreduce", "--system", "prace-1080ti", "--nodes", "2")["dist"] == "ddp"  # trains only
    assert _plan_json("resnet50", "--image", "tf1.14-nccl", "--system", "txgaia")["dist"] is None


BAD = [
    (["--dist", "horovd"], ["unknown --dist 'horovd'", "did you mean 'horovod'?", "valid: dataparallel, ddp, fsdp, horovod"]),
    (["--image", "cpu-reference", "--dist", "horovod"],
     ["--dist horovod, but image 'cpu-reference' has no Horovod", "--image pytorch1.0-horovod", "or --dist ddp"]),
    (["--image", "cpu-reference", "--system", "prace-1080ti"],
     ["system 'prace-1080ti' trains with Horovod by default", "valid: --image ", "--image pytorch1.0-horovod"]),
    (["--launcher", "horovodrun", "--dist", "ddp", "--ranks-per-node", "2"],
     ["--launcher horovodrun starts Horovod ranks", "valid: --dist horovod, or --launcher mpirun"]),
    (["--image", "tf1.14-nccl", "--system", "txgaia", "--dist", "horovod"],
     ["--dist horovod applies to dlrun's PyTorch harness", "valid: no --dist"]),
]


@pytest.mark.parametrize("extra,expected", BAD, ids=[" ".join(b[0]) for b in BAD])
def test_bad_dist_is_one_line_exit_2(dlrun_home, extra, expected):
    for command in ("run", "plan"):
        proc = run_cli(command, "resnet50", *extra)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and all(part in lines[0] for part in expected), lines
    assert not (dlrun_home / "runs").exists() or not any((dlrun_home / "runs").iterdir())


def test_allreduce_workload_refuses_horovod(dlrun_home):
    proc = run_cli("plan", "allreduce", "--ranks-per-node", "2", "--image", "pytorch1.0-horovod", "--dist", "horovod")
    assert proc.returncode == 2 and "--dist horovod (or --launcher horovodrun) applies to training" in proc.stderr


# ------------------------------------------------------------------------------------ real runs
def _stored_result(run_id: str) -> dict:
    return cli_json("results", "show", run_id)["results"][0]["extra"]


@pytest.mark.horovod
@pytest.mark.mpi
def test_two_rank_horovod_runs_match_the_ddp_contract(dlrun_home):
    """One DDP run and two Horovod runs (mpirun, horovodrun) of the trivial model on the host's Python (which
    has Horovod: make horovod): each is stored, and the results carry the same fields."""
    assert probe_host().horovod, "Horovod is not installed in this Python; run `make horovod`"
    path = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}  # horovodrun
    for extra in ([], ["--dist", "horovod"], ["--launcher", "horovodrun"]):
        proc = run_cli("run", "trivial", *TINY, *extra, env=path)
        assert proc.returncode == 0, f"{extra}: {proc.stdout[-3000:]}{proc.stderr[-3000:]}"
        assert "total images/sec:" in proc.stdout
    runs = {run["launcher"] + "/" + str(i): run for i, run in enumerate(reversed(cli_json("results", "list")))}
    assert [key.split("/")[0] for key in runs] == ["mpirun", "mpirun", "horovodrun"]
    ddp, hvd_mpirun, hvd_horovodrun = (_stored_result(run["id"]) for run in runs.values())
    keys = [cli_json("results", "show", run["id"])["key"] for run in runs.values()]
    assert keys[0]["framework"] == "pytorch" and keys[1]["framework"] == keys[2]["framework"] == "pytorch/horovod"
    assert keys[1]["framework_version"].endswith("+horovod" + probe_host().horovod)
    assert ddp["dist"] == "ddp" and ddp["horovod_version"] is None and ddp["rank_source"] == "openmpi"
    for result in (hvd_mpirun, hvd_horovodrun):
        assert result["dist"] == "horovod" and result["horovod_version"] == probe_host().horovod
        assert result["rank_source"] == "horovod" and result["world_size"] == 2
        assert result["backend"] in ("mpi", "gloo") and result["status"] == "ok"
        assert set(result) == set(ddp), set(result) ^ set(ddp)
    for run in runs.values():
        plan = json.loads((Path(run["run_dir"]) / "plan.json").read_text())
        log = (Path(run["run_dir"]) / "output.log").read_text()
        assert f"Variables:   {plan['dist']}" in log
        assert plan["dist"] == ("ddp" if run is list(runs.values())[0] else "horovod")
    assert "horovodrun -np 2 -H localhost:2" in (Path(list(runs.values())[2]["run_dir"]) / "run.sh").read_text()


@pytest.mark.horovod
@pytest.mark.mpi
def test_replica_check_catches_horovod_ranks_that_do_not_average():
    """Without the DistributedOptimizer wrap (test hook) the two ranks train on different data apart: the
    end-of-run check over Horovod's allgather must say so (exit 4, no result line)."""
    env = {**os.environ, **MPIRUN_ROOT_OK, "OMP_NUM_THREADS": "1", "DLRUN_HARNESS_TEST_HOROVOD_NO_WRAP": "1"}
    argv = ["mpirun", "-np", "2", "--oversubscribe", "-x", "DLRUN_HARNESS_TEST_HOROVOD_NO_WRAP", sys.executable,
            str(HARNESS_DIR / "harness_pytorch.py"), "--model", "trivial", "--batch-size", "2", "--steps", "2",
            "--warmup-steps", "0", "--threads", "1", "--dist", "horovod", "--expected-world-size", "2"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "replicas diverged" in proc.stderr and "DLRUN_RESULT" not in proc.stdout


def test_harness_refuses_horovod_for_the_allreduce_benchmark():
    proc = subprocess.run([sys.executable, str(HARNESS_DIR / "harness_pytorch.py"), "--benchmark", "allreduce",
                           "--dist", "horovod"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "dlrun-harness: error: --dist horovod applies to training; the collective benchmarks use the process "
        "group; valid: --dist ddp"]
