"""Bad input: exit 2, one line naming the bad value and what is valid, and nothing written."""
from __future__ import annotations

import os

import pytest
from conftest import run_cli

CPUS = len(os.sched_getaffinity(0))

CASES = [
    (["run", "resnet5"], ["unknown workload 'resnet5'", "did you mean 'resnet50'?", "valid: alexnet"]),
    (["run", "resnet50", "--image", "hots"], ["unknown image 'hots'", "did you mean 'host'?"]),
    (["run", "resnet50", "--system", "localhots"], ["unknown system 'localhots'", "did you mean 'localhost'?"]),
    (["run", "resnet50", "--nodes", "0"], ["--nodes must be a positive integer, got 0"]),
    (["run", "resnet50", "--nodes", "-3"], ["--nodes must be a positive integer, got -3"]),
    (["run", "resnet50", "--nodes", "2"], ["--nodes 2 exceeds system 'localhost'", "valid: 1..1"]),
    (["run", "resnet50", "--ranks-per-node", "0"], ["--ranks-per-node must be a positive integer, got 0"]),
    (["run", "resnet50", "--ranks-per-node", str(CPUS + 1)],
     [f"--ranks-per-node {CPUS + 1} exceeds", f"valid: 1..{CPUS}"]),
    (["run", "resnet50", "--batch-size", "0"], ["--batch-size must be a positive integer, got 0"]),
    (["run", "resnet50", "--steps", "-1"], ["--steps must be a positive integer, got -1"]),
    (["run", "resnet50", "--warmup-steps", "-1"], ["--warmup-steps must be >= 0, got -1"]),
    (["run", "resnet50", "--global-batch-size", "5", "--ranks-per-node", "2"],
     ["--global-batch-size 5 does not divide over 2 ranks", "valid: a multiple of 2, e.g. 4 or 6"]),
    (["run", "resnet50", "--batch-size", "4", "--global-batch-size", "8"], ["either --batch-size", "not both"]),
    (["run", "resnet50", "--precision", "fp8"], ["unknown --precision 'fp8'", "valid: amp, bf16, fp16, fp32, tf32"]),
    (["run", "resnet50", "--allocator", "tcmaloc"],
     ["unknown --allocator 'tcmaloc'", "did you mean 'tcmalloc'?", "valid: auto, glibc-tuned, jemalloc, system"]),
    (["run", "resnet50", "--image", "tf1.14-nccl", "--allocator", "jemalloc"],
     ["--allocator jemalloc applies to dlrun's PyTorch harness", "valid for it: auto"]),
    (["run", "allreduce"], ["workload 'allreduce' measures all-reduce between ranks and needs at least 2, got 1",
                            "valid: --ranks-per-node 2 or more"]),
    (["run", "allreduce", "--ranks-per-node", "2", "--batch-size", "8"],
     ["workload 'allreduce' trains no model; --batch-size", "valid: --steps and --warmup-steps"]),
    (["run", "allreduce", "--image", "tf1.14-nccl", "--system", "txgaia", "--nodes", "2"],
     ["workload 'allreduce' has no tf_cnn_benchmarks model"]),
    (["run", "resnet50", "--launcher", "mpirn", "--ranks-per-node", "2"],
     ["unknown launcher 'mpirn'", "did you mean 'mpirun'?"]),
    (["run", "resnet50", "--nodes", "many"], ["Invalid value for '--nodes'"]),
    (["run", "resnet50", "--bind", "relative"], ["bad --bind 'relative'", "SRC[:DST][:ro|rw]"]),
    (["run", "resnet50", "--env", "1X=y"], ["bad --env '1X=...'", "NAME=VALUE"]),
    (["run", "resnet50", "--data", "/nonexistent/data dir"], ["--data '/nonexistent/data dir' is not a directory"]),
    (["workloads", "show", "vgg61"], ["unknown workload 'vgg61'", "did you mean 'vgg16'?"]),
    (["systems", "show", "localhst"], ["unknown system 'localhst'", "did you mean 'localhost'?"]),
    (["parse", "/nonexistent/log.txt"], ["cannot read log '/nonexistent/log.txt'"]),
    (["run", "trivial", "--system", "txgaia", "--time", "0", "--dry-run"], ["bad --time '0'"]),  # Slurm: no limit
]


@pytest.mark.parametrize("argv,expected", CASES, ids=[" ".join(c[0]) for c in CASES])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(dlrun_home, argv, expected):
    proc = run_cli(*argv)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("dlrun: error: ")
    for fragment in expected:
        assert fragment in lines[0]
    assert not dlrun_home.exists(), "a failed validation must not create run directories or a store"


def test_results_show_unknown_id(dlrun_home):
    proc = run_cli("results", "show", "nope")
    assert proc.returncode == 2
    assert "unknown run id 'nope'" in proc.stderr
