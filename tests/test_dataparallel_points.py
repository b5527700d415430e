"""Experiment points choose --dist from their `parallelism` axis, and a DataParallel point's one process drives
the point's GPU count (Ren et al. Fig. 9, E001_dataparallel_vs_ddp); the experiment's status is derived from the
code (dlrun.catalog.capabilities), never edited by hand."""
from __future__ import annotations

import dataclasses
import re
import shlex

import pytest
from conftest import run_cli

from dlrun.catalog.capabilities import has
from dlrun.catalog.experiment_points import effective_status, expand
from dlrun.harness import load_harness
from dlrun.runoptions import BY_NAME

EXPERIMENT = "E001_dataparallel_vs_ddp"
HARNESS = ["python", "/opt/dlrun/harness_pytorch.py", "--model", "resnet50_v1.5"]
#: What every point shares after its threads (the options in declaration order: dlrun.runoptions).
SHARED = ["--batch-size", "256", "--steps", "20", "--warmup-steps", "5", "--precision", "fp32", "--data-workers", "4"]


def _exec_line(stdout: str, point: int) -> list[str]:
    """The argv of point `point`'s exec line in `reproduce --dry-run` (point 1 in full, later ones as a diff)."""
    block = re.split(r"^# ----- point \d+: ", stdout, flags=re.M)[point]
    line = next(line for line in block.splitlines() if line.lstrip("+").startswith("exec "))
    return shlex.split(line.lstrip("+"))[1:]


def test_points_render_dataparallel_over_their_gpu_count_and_ddp_over_ranks(dlrun_home):
    proc = run_cli("reproduce", EXPERIMENT, "--system", "dgx2", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "10 point(s), 10 to run, 0 skipped" in " ".join(proc.stdout.split())
    data_parallel = _exec_line(proc.stdout, 3)  # parallelism=torch.nn.DataParallel gpus=4
    assert "parallelism=torch.nn.DataParallel gpus=4" in proc.stdout.split("# ----- point 3: ")[1].splitlines()[0]
    # Docker's container gets the process's CPU affinity as its cpuset (dlrun.runtimes.docker)
    assert data_parallel[:2] == ["sh", "-c"] and data_parallel[2].startswith("exec docker run --cpuset-cpus=")
    assert "mpirun" not in data_parallel
    assert "dlrun-rank" not in data_parallel  # no per-rank GPU pinning: one process, GPUs chosen by the harness
    assert data_parallel[data_parallel.index("python"):] == HARNESS + ["--threads", "48", *SHARED] + [
        "--dist", "dataparallel", "--dataparallel-gpus", "4", "--timeout-s", "1800", "--device", "cuda",
        "--expected-world-size", "1"]
    ddp = _exec_line(proc.stdout, 8)  # parallelism=distributed data parallel gpus=4
    assert "parallelism=distributed data parallel gpus=4" in proc.stdout.split("# ----- point 8: ")[1].splitlines()[0]
    assert ddp[:5] == ["mpirun", "-np", "4", "-H", "localhost:4"]
    # GPUs 0-3 sit on socket 0 (24 cores): four ranks bound there get 6 threads each, not 48 / 4
    assert ddp[ddp.index("python"):] == HARNESS + ["--threads", "6", *SHARED] + [
        "--timeout-s", "1800", "--device", "cuda", "--expected-world-size", "4"]


def test_a_dataparallel_point_is_one_process_on_one_node(catalog):
    points = expand(catalog.experiment(EXPERIMENT), catalog.system("dgx2"), catalog.workloads, catalog.images)
    dp = {p.gpus: p for p in points if p.dist == "dataparallel"}
    assert sorted(dp) == [1, 2, 4, 8, 16]
    assert {(p.nodes, p.ranks_per_node) for p in dp.values()} == {(1, 1)}
    assert dp[4].plan_options()["dist"] == "dataparallel" and dp[4].plan_options()["dataparallel_gpus"] == 4
    ddp = next(p for p in points if p.dist == "ddp" and p.gpus == 4)
    assert (ddp.nodes, ddp.ranks_per_node) == (1, 4) and ddp.plan_options()["dataparallel_gpus"] is None


def test_the_status_is_runnable_because_the_code_has_what_it_requires(catalog, monkeypatch):
    spec = catalog.experiment(EXPERIMENT)
    assert spec.status.kind == "needs-feature"  # as declared; runnable only by derivation
    assert all(has(name, catalog) for name in spec.status.requires)
    assert effective_status(spec, catalog.workloads).kind == "runnable"
    monkeypatch.setitem(BY_NAME, "dist", dataclasses.replace(BY_NAME["dist"], axis=None))
    assert not has("parallelism-axis", catalog)
    assert effective_status(spec, catalog.workloads).kind == "needs-feature"
    skipped = expand(spec, catalog.system("dgx2"), catalog.workloads, catalog.images)
    assert {p.skip.split(":")[0] for p in skipped} == {"needs-feature"}


@pytest.mark.parametrize("args,message", [
    (("resnet50", "--dist", "dataparallel"), "valid: --dist ddp (or fsdp) on CPUs"),
    (("resnet50", "--system", "dgx2", "--dist", "dataparallel", "--dataparallel-gpus", "17"),
     "--dataparallel-gpus 17 exceeds the 16 GPU(s) per node of system 'dgx2'; valid: 1..16"),
    (("resnet50", "--system", "dgx2", "--dataparallel-gpus", "4"),
     "--dataparallel-gpus 4 applies to --dist dataparallel"),
])
def test_dataparallel_misuse_is_one_line(dlrun_home, args, message):
    proc = run_cli("run", *args, "--dry-run")
    assert proc.returncode == 2 and message in proc.stderr and proc.stderr.strip().count("\n") == 0, proc.stderr


def test_the_harness_refuses_more_gpus_than_it_sees():
    import torch

    fsdp = load_harness("pytorch", "fsdp")
    with pytest.raises(fsdp.HarnessError,
                       match=r"--dataparallel-gpus 1: this process sees 0 GPU\(s\)"):
        fsdp.DataParallelComm(torch.device("cpu"), 1)


def test_the_harness_takes_the_rendered_gpu_count():
    parser = load_harness("pytorch").build_parser()
    args = parser.parse_args(["--model", "resnet50_v1.5", "--dist", "dataparallel", "--dataparallel-gpus", "4"])
    assert (args.dist, args.dataparallel_gpus) == ("dataparallel", 4)
    assert parser.parse_args(["--model", "resnet50_v1.5"]).dataparallel_gpus is None
