"""Pre-flight that refuses what cannot run on this node: fewer GPUs than the plan's ranks, a container engine
that does not answer, an image never built here (no recorded digest) or absent from the runtime's store.
GPUs come from a stand-in `nvidia-smi` (this machine has none); the Docker CLI here has no daemon, which is
the real failure; a stand-in `docker` answers where a daemon is needed. Errors exit non-zero in `doctor`,
`plan`, `run` and `--dry-run` alike, and `--skip-checks` still runs."""
from __future__ import annotations

import json
import os
import sys

import pytest
from conftest import run_cli

from dlrun.images import lock
from dlrun.preflight.node import gpu_findings, image_findings

GPU_ROWS = "\n".join(f"{i}, Tesla V100-SXM3-32GB, 32510, 00000000:{0x34 + i:02X}:00.0, GPU-{i:08d}, 418.67"
                     for i in range(2))
FAKE_NVIDIA_SMI = f"""#!/bin/sh
case "$1" in --query-gpu=*) printf '%s\\n' "{GPU_ROWS}" ;; *) echo "GPU0 GPU1" ;; esac
"""
FAKE_DOCKER = f"""#!{sys.executable}
import os, sys
if sys.argv[1:2] == ["version"]:
    print("24.0.7")
elif sys.argv[1:3] == ["image", "inspect"]:
    sys.exit(0 if os.environ.get("FAKE_DOCKER_HAS_IMAGE") else 1)
"""


@pytest.fixture
def node(tmp_path, dlrun_home, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("nvidia-smi", FAKE_NVIDIA_SMI), ("docker", FAKE_DOCKER)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    lock_file = tmp_path / "images.lock"
    monkeypatch.setenv("DLRUN_IMAGES_LOCK", str(lock_file))
    monkeypatch.setenv("DLRUN_IMAGES_DIR", str(tmp_path / "store"))
    return {"bin": bin_dir, "lock": lock_file, "path": f"{bin_dir}:{os.environ['PATH']}"}


def _checks(proc) -> dict[str, dict]:
    return {check["check"]: check for check in json.loads(proc.stdout)["checks"]}


def test_doctor_refuses_a_dgx2_job_on_a_node_without_its_gpus_daemon_and_image(node):
    """The issue's case: this node has no GPU, a Docker CLI without a daemon, and the image was never built."""
    path_without_fakes = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p != str(node["bin"]))
    proc = run_cli("doctor", "--system", "dgx2", "--image", "pytorch1.0-nvcr18.11", "--json",
                   env={"PATH": path_without_fakes})
    assert proc.returncode == 1
    checks = _checks(proc)
    assert checks["gpus"]["level"] == "error"
    assert checks["gpus"]["message"].startswith("the plan runs 16 rank(s) with one GPU each, but this node has 0 GPU(s)")
    assert checks["container-engine"]["level"] == "error"
    assert checks["container-engine"]["message"].startswith("runtime docker cannot start containers here: ")
    assert checks["image"]["level"] == "error"
    assert checks["image"]["message"].startswith("image pytorch1.0-nvcr18.11 (x86_64) has no digest in ")


def test_doctor_with_two_gpus_a_daemon_and_a_built_image(node):
    lock.record("pytorch1.0-nvcr18.11", "x86_64", digest="sha256:" + "a" * 64)
    env = {"PATH": node["path"]}
    proc = run_cli("doctor", "--system", "dgx2", "--image", "pytorch1.0-nvcr18.11", "--json", env=env)
    checks = _checks(proc)
    assert checks["gpus"]["level"] == "error" and "but this node has 2 GPU(s)" in checks["gpus"]["message"]
    assert checks["gpus"]["fix"] == "--ranks-per-node 2"
    assert "container-engine" not in checks  # the stand-in daemon answers
    assert checks["image"]["level"] == "error"
    assert checks["image"]["message"] == ("image pytorch1.0-nvcr18.11 (x86_64) is not here for runtime docker: docker "
                                          "has no image localhost/dlrun/pytorch1.0-nvcr18.11:x86_64")
    ok = run_cli("doctor", "--system", "dgx2", "--image", "pytorch1.0-nvcr18.11", "--json",
                 env={**env, "FAKE_DOCKER_HAS_IMAGE": "1"})
    assert _checks(ok)["image"]["level"] == "ok"
    # run refuses it before anything starts, with every reason on one line; --skip-checks goes on
    proc = run_cli("run", "trivial", "--system", "dgx2", "--image", "pytorch1.0-nvcr18.11", env=env)
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("dlrun: error: refusing to run: the plan runs 16 rank(s) with one GPU each")
    assert "--skip-checks runs anyway" in line


def test_gpu_check_counts_one_gpu_per_rank(dlrun_home):
    from matrix_catalog import matrix_plan

    plan = matrix_plan("singularity", "mpirun", "tcp", scheduler="local", nodes=1)  # 2 ranks, 1 GPU each
    two = {"gpu": {"nvidia_smi": True, "gpus": [{"index": 0}, {"index": 1}]}}
    assert [f.level for f in gpu_findings(plan, two)] == ["ok"]
    [finding] = gpu_findings(plan, {"gpu": {"nvidia_smi": True, "gpus": [{"index": 0}]}})
    assert (finding.level, finding.fix) == ("error", "--ranks-per-node 1")
    assert "(nvidia-smi lists none)" in gpu_findings(plan, {"gpu": {"nvidia_smi": True, "gpus": []}})[0].message


def test_image_must_be_unpacked_for_charliecloud_and_have_a_sif_for_singularity(node, dlrun_home):
    from matrix_catalog import matrix_plan

    lock.record("matrix-image", "x86_64", digest="sha256:" + "b" * 64)
    plan = matrix_plan("charliecloud", "mpirun", "tcp", scheduler="local", nodes=1)
    [finding] = image_findings(plan, runs_here=True, engine_ok=True)
    assert finding.level == "error" and "no unpacked root filesystem at " in finding.message
    sif = matrix_plan("singularity", "mpirun", "tcp")  # a Slurm job: the SIF is on the shared filesystem
    [finding] = image_findings(sif, runs_here=False, engine_ok=True)
    assert finding.level == "error" and finding.message.endswith(f"no SIF file at {sif.image.sif}")


def test_plan_and_dry_run_refuse_what_the_plan_itself_cannot_do(dlrun_home):
    """TX-GAIA runs Omni-Path; pytorch1.0-horovod's Open MPI has no PSM2. Before, --dry-run printed the error
    and exited 0."""
    args = ("resnet50", "--system", "txgaia", "--image", "pytorch1.0-horovod")
    for command in (("plan", *args), ("run", *args, "--dry-run")):
        proc = run_cli(*command)
        assert proc.returncode == 2 and proc.stdout == ""
        assert proc.stderr.startswith("dlrun: error: refusing to run: fabric opa but the image's openmpi 3.1.2")
    plan = run_cli("plan", *args, "--skip-checks")
    assert plan.returncode == 0 and json.loads(plan.stdout)["fabric"] == "opa"


def test_host_runtime_says_it_passes_host_paths(dlrun_home, tmp_path):
    data = tmp_path / "imagenet"
    data.mkdir()
    proc = run_cli("run", "trivial", "--data", str(data), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == (f"dlrun: warn: runtime host runs no container, so nothing is mounted: the "
                                   f"workload is given the host path {data} (not at /data); fix: use a container "
                                   "--runtime to mount them at their targets")


def test_kubernetes_pods_are_not_checked_against_this_nodes_gpus(node, dlrun_home):
    from matrix_catalog import matrix_plan

    from dlrun.preflight.node import node_findings

    lock.record("matrix-image", "x86_64", digest="sha256:" + "c" * 64)
    plan = matrix_plan("singularity", "mpirun", "tcp", scheduler="kubernetes")
    findings = node_findings(plan, {"gpu": {"nvidia_smi": False, "gpus": []}})
    assert [(f.check, f.level) for f in findings] == [("image", "ok")]
