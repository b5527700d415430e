"""Every launcher with every kind of workload (issue 36, break 5: `--launcher torchrun` with a `kind: command`
workload rendered `exec bash -m torch.distributed.run ...`, exit 127).

What a launcher wraps is the rank's program, and the workload kinds come in four programs: the harness
script (every training and collective kind, which differ only in its arguments), the storage reader script,
a site's `bash -c` command, and the image's nccl-tests binary. `test_every_kind_is_one_of_the_programs`
renders every kind with every launcher and holds each kind to its program, intact behind the launcher (a new
kind, or a new program, fails there until it is added here). The real runs then start each program under
each launcher this machine runs (no launcher, mpirun, torchrun and horovodrun locally; srun and torchrun
under srun on the tests' Slurm cluster). nccl-tests is a CUDA binary needing GPUs: only rendered here; jsrun
is IBM's (LSF): only rendered here.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import get_args

import pytest
from conftest import cli_json, run_cli
from fixtures_slurm import CLUSTER_SYSTEM
from matrix_catalog import SCHEDULER_FOR, matrix_catalog

from dlrun.catalog.loader import Catalog
from dlrun.catalog.models import WorkloadKind, WorkloadSpec
from dlrun.errors import UsageError
from dlrun.plan import resolve_plan
from dlrun.registry import LAUNCHERS
from dlrun.render import STORAGE_READER, render_job, workload_command

#: A site command that prints its result once (rank 0), whichever launcher numbered the ranks.
COMMAND = [{"name": "once", "kind": "command", "description": "rank 0 prints a result",
            "result": {"format": "dlrun-result"},
            "command": '[ "$DLRUN_RANK" = 0 ] || exit 0; echo "DLRUN_RESULT {\\"metric\\": \\"throughput\\", '
                       '\\"value\\": 5, \\"unit\\": \\"images/sec\\"}"'}]
#: One workload per program; the storage reader refuses more than one process.
PROGRAMS = {"harness": ("trivial", 2), "storage": ("storage_seq_read", 1), "command": ("once", 2)}
NOT_RUN_HERE = {"nccl-tests": "the image's nccl-tests binary is built against CUDA and NCCL; no GPU here"}


def _program(argv: list[str], python: str) -> str:
    if argv[:2] == ["bash", "-c"]:
        return "command"
    if argv[0] != python:
        return "nccl-tests"
    return "storage" if argv[1].endswith("/" + STORAGE_READER) else "harness"


def _kind_workload(kind: str) -> WorkloadSpec:
    extra = {"cnn-training": {"model": "trivial"}, "bert-finetuning": {"model": "bert-base"},
             "llm-pretraining": {"model": "llama3_tiny"}, "nccl-tests": {"nccl_test": "all_reduce_perf"},
             "storage": {"storage_test": "sequential"},
             "command": {"command": "echo hi", "result": {"format": "dlrun-result"}}}.get(kind, {})
    return WorkloadSpec(name=f"k-{kind}", kind=kind, description="d", **extra)


@pytest.mark.parametrize("kind", get_args(WorkloadKind))
def test_every_kind_is_one_of_the_programs(kind, tmp_path):
    base = matrix_catalog()
    workload = _kind_workload(kind)
    catalog = Catalog(images=base.images, workloads={**base.workloads, workload.name: workload},
                      systems=base.systems)
    refused: list[str] = []
    image = "matrix-image" if kind != "nccl-tests" else next(  # an image that ships nccl-tests
        name for name, spec in sorted(base.images.items())
        if getattr(getattr(spec, "nccl_tests", None), "path", None) and spec.framework == "pytorch"
        and "x86_64" in spec.arch)
    for launcher in LAUNCHERS.names():
        nodes, ranks = (1, 1) if launcher == "none" or kind == "storage" else (2, 2)
        try:
            plan = resolve_plan(catalog, workload.name, system="matrix", launcher=launcher, nodes=nodes,
                                scheduler=SCHEDULER_FOR[launcher], ranks_per_node=ranks, image=image,
                                data=str(tmp_path) if kind == "storage" else None)
            script = render_job(plan).script
        except UsageError as exc:  # a combination the plan refuses, in one line naming what would do
            assert "valid" in str(exc), (kind, launcher, str(exc))
            refused.append(launcher)
            continue
        program = workload_command(plan)
        assert _program(program, plan.image.python) in {*PROGRAMS, *NOT_RUN_HERE}
        assert "bash -m " not in script, (kind, launcher)
        if launcher == "torchrun":  # the image's Python runs torchrun; after its options a script, or
            # --no_python and the program
            assert f"{plan.image.python} -m torch.distributed.run " in script, (kind, script[-800:])
            expected = (" ".join(program[1:3]) if program[0] == plan.image.python
                        else "--no_python " + " ".join(program[:2]))
            assert expected in script, (kind, expected, script[-800:])
    # nccl-tests is an MPI program: torchrun and horovodrun refuse it, in one line (above)
    assert "mpirun" not in refused and ("torchrun" not in refused or kind == "nccl-tests"), (kind, refused)


def _site(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    (site / "workloads").mkdir(parents=True)
    (site / "workloads" / "once.yaml").write_text(json.dumps(COMMAND))
    return site


@pytest.fixture
def storage_folder(tmp_path, dlrun_home) -> Path:
    out = tmp_path / "storage"
    cli_json("data", "synth", str(out), "--format", "storage", "--file-bytes", "200000", "--files", "4",
             "--small-bytes", "1000")
    return out / "sequential"


def _run(program: str, launcher: str, data: Path, env: dict[str, str], *extra: str, nodes: int = 1) -> dict:
    """Run `program` under `launcher`: its ranks on one node here, or one rank per node on `nodes`."""
    workload, ranks = PROGRAMS[program]
    args = ["run", workload, "--launcher", launcher, "--steps", "2", "--warmup-steps", "1", *extra]
    if nodes > 1:
        args += ["--nodes", str(min(nodes, ranks)), "--ranks-per-node", "1"]
    elif launcher != "none":
        args += ["--ranks-per-node", str(ranks)]
    if program == "harness":
        args += ["--batch-size", "4"]
    if program == "storage":
        args += ["--data", str(data)]
    proc = run_cli(*args, env=env, timeout=600)
    assert proc.returncode == 0, f"{program} under {launcher}: {proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    run = cli_json("results", "list", env=env)[0]
    assert (run["workload"], run["launcher"], run["status"]) == (workload, launcher, "ok"), run
    assert "bash -m" not in (Path(run["run_dir"]) / "run.sh").read_text()
    return run


#: The launchers that run here, and the scheduler each runs under in these tests.
RUN_HERE = {"none": "local", "mpirun": "local", "torchrun": "local", "horovodrun": "local", "srun": "slurm",
            "torchrun/slurm": "slurm"}
#: Cells of the grid that other tests run for real already (the same program under the same launcher).
RUN_ELSEWHERE = {
    ("none", "harness"): "test_run_local.py::test_single_rank_run_and_results_views",
    ("mpirun", "harness"): "test_local_launchers.py::test_mpirun_two_ranks_with_hostile_data_path_and_env",
    ("torchrun", "harness"): "test_local_launchers.py::test_torchrun_two_ranks",
    ("horovodrun", "harness"): "test_horovod.py::test_two_rank_horovod_runs_match_the_ddp_contract",
    ("srun", "harness"): "test_slurm_integration.py::test_two_node_job_trains_and_is_collected",
    ("srun", "command"): "test_byo.py::test_command_workloads_under_slurm",
}
LOCAL = [(launcher, program) for launcher in ("none", "mpirun", "torchrun") for program in PROGRAMS
         if (launcher, program) not in RUN_ELSEWHERE]
HOROVODRUN = [program for program in PROGRAMS if ("horovodrun", program) not in RUN_ELSEWHERE]
SLURM = [(launcher.split("/")[0], program) for launcher in ("srun", "torchrun/slurm") for program in PROGRAMS
         if (launcher, program) not in RUN_ELSEWHERE]


def test_the_grid_is_whole():
    """Every launcher that runs here with every program: run below, or by the named test."""
    here = {("horovodrun", p) for p in HOROVODRUN} | set(LOCAL) | set(RUN_ELSEWHERE) | {
        ("srun" if launcher == "srun" else "torchrun/slurm", p) for launcher, p in SLURM}
    assert here == {(launcher, program) for launcher in RUN_HERE for program in PROGRAMS}
    for where in RUN_ELSEWHERE.values():
        file, name = where.split("::")
        assert f"def {name}(" in (Path(__file__).parent / file).read_text(), where


@pytest.mark.mpi
@pytest.mark.parametrize("launcher,program", LOCAL, ids=[f"{a}-{b}" for a, b in LOCAL])
def test_each_program_under_each_local_launcher(dlrun_home, tmp_path, storage_folder, launcher, program):
    run = _run(program, launcher, storage_folder, {"DLRUN_PATH": str(_site(tmp_path))})
    if launcher != "none" and program != "storage":
        assert run["world_size"] == 2


@pytest.mark.horovod
@pytest.mark.mpi
@pytest.mark.parametrize("program", HOROVODRUN)
def test_each_program_under_horovodrun(dlrun_home, tmp_path, storage_folder, program):
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"  # horovodrun beside Python
    env = {"DLRUN_PATH": str(_site(tmp_path)), "PATH": path}
    if program == "storage":  # horovodrun starts Horovod ranks, which the storage reader is not: one line
        proc = run_cli("run", "storage_seq_read", "--launcher", "horovodrun", "--data", str(storage_folder), env=env)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "applies to training" in proc.stderr
        return
    _run(program, "horovodrun", storage_folder, env)


def test_each_program_under_slurm(slurm_cluster, dlrun_home, tmp_path, storage_folder):
    """srun, and torchrun started once per node by srun, on the tests' two-node cluster."""
    env = {**slurm_cluster.env, "DLRUN_PATH": os.pathsep.join([slurm_cluster.env["DLRUN_PATH"], str(_site(tmp_path))])}
    for launcher, program in SLURM:
        run = _run(program, launcher, storage_folder, env, "--system", CLUSTER_SYSTEM, nodes=2)
        assert run["scheduler"] == "slurm"
