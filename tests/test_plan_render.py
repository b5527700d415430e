"""Plan and render: the design-card shorthand, the plan as JSON, the exact local script."""
from __future__ import annotations

import pytest

import json
import subprocess

from conftest import run_cli

from pydantic import ValidationError

from dlrun.catalog import load_catalog

from dlrun.probe.host import probe_host
from dlrun.cli.app import normalise_argv
from dlrun.plan import resolve_plan
from dlrun.render import render_job


def test_design_card_form_parses_like_run():
    assert normalise_argv(["--image", "tf1.14-nccl", "--nodes", "8", "resnet50"]) == \
        ["run", "--image", "tf1.14-nccl", "--nodes", "8", "resnet50"]
    assert normalise_argv(["resnet50"]) == ["run", "resnet50"]
    assert normalise_argv(["images", "list"]) == ["images", "list"]
    assert normalise_argv(["--help"]) == ["--help"]


def test_design_card_form_gives_the_same_result_as_run(dlrun_home):
    short = run_cli("--image", "tf1.14-nccl", "--nodes", "8", "resnet50", "--dry-run")
    long = run_cli("run", "resnet50", "--image", "tf1.14-nccl", "--nodes", "8", "--dry-run")
    assert (short.returncode, short.stdout, short.stderr) == (long.returncode, long.stdout, long.stderr)
    ok_short = run_cli("--nodes", "1", "--ranks-per-node", "2", "resnet18", "--dry-run")
    ok_long = run_cli("run", "resnet18", "--nodes", "1", "--ranks-per-node", "2", "--dry-run")
    assert ok_short.returncode == 0 and ok_short.stdout == ok_long.stdout


def test_plan_json_is_complete(dlrun_home):
    proc = run_cli("plan", "resnet18", "--ranks-per-node", "2", "--global-batch-size", "8", "--steps", "3")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["world_size"] == 2 and plan["batch_size"] == 4 and plan["global_batch_size"] == 8
    assert plan["launcher"] == "mpirun" and plan["scheduler"] == "local" and plan["runtime"] == "host"
    assert plan["workload"]["model"] == "resnet18" and plan["image"]["name"] == "host"
    assert plan["steps"] == 3 and plan["threads_per_rank"] >= 1


def test_plan_is_immutable(dlrun_home):
    plan = resolve_plan(load_catalog(host=probe_host()), "resnet18")
    with pytest.raises(ValidationError, match="frozen"):
        plan.nodes = 4  # type: ignore[misc]


def test_single_rank_script_runs_the_harness_directly(dlrun_home):
    rendered = render_job(resolve_plan(load_catalog(host=probe_host()), "resnet50", steps=2, warmup_steps=1))
    last = rendered.script.strip().splitlines()[-1]
    assert last.startswith("exec ") and "harness_pytorch.py --model resnet50_v1.5" in last
    assert "mpirun" not in rendered.script
    assert "--expected-world-size 1" in last
    assert "--allocator" not in last  # auto is the harness's default


def test_allreduce_workload_renders_the_harness_sweep(dlrun_home):
    plan = resolve_plan(load_catalog(host=probe_host()), "allreduce_1mb_1gb", ranks_per_node=2)
    assert (plan.steps, plan.warmup_steps) == (500, 5)  # the workload's, not the system's training defaults
    last = render_job(plan).script.strip().splitlines()[-1]
    assert last.startswith("exec mpirun -np 2 ")
    assert last.endswith("harness_pytorch.py --benchmark allreduce --min-bytes 1048576 --max-bytes 1073741824 "
                         "--size-factor 2 --threads 1 --steps 500 --warmup-steps 5 "
                         "--timeout-s 1800 "  # the plan's time limit, 30 min
                         "--device cpu --expected-world-size 2")
    assert "# workload=allreduce_1mb_1gb model=allreduce " in render_job(plan).script


def test_allocator_choice_reaches_the_harness_and_the_plan(dlrun_home):
    plan = resolve_plan(load_catalog(host=probe_host()), "resnet50", steps=2, allocator="system")
    assert plan.summary()["allocator"] == "system"
    last = render_job(plan).script.strip().splitlines()[-1]
    assert last.endswith("--timeout-s 1800 --allocator system --device cpu --expected-world-size 1")


def test_two_rank_script_uses_mpirun(dlrun_home):
    rendered = render_job(resolve_plan(load_catalog(host=probe_host()), "resnet18", ranks_per_node=2, batch_size=4, steps=3))
    last = rendered.script.strip().splitlines()[-1]
    assert last.startswith("exec mpirun -np 2 -H localhost:2 --bind-to none --map-by slot ")
    for name in ("MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS"):
        assert f"-x {name}" in last
    assert "--expected-world-size 2" in last
    assert subprocess.run(["bash", "-n"], input=rendered.script, text=True).returncode == 0


def test_hostile_env_value_is_quoted_not_executed(dlrun_home, tmp_path):
    marker = tmp_path / "pwned"
    rendered = render_job(resolve_plan(load_catalog(host=probe_host()), "resnet18", env=[f"X=a b;$(touch {marker})'\"`id`"]))
    script = rendered.script.replace(rendered.script.strip().splitlines()[-1], 'printf "%s" "$X"')
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "DLRUN_RUN_DIR": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"a b;$(touch {marker})'\"`id`"
    assert not marker.exists()


def test_tensorflow_image_runs_tf_cnn_benchmarks(dlrun_home):
    """The design card's job: the TF 1.14 image runs tf_cnn_benchmarks under Horovod on 8 TX-GAIA nodes."""
    proc = run_cli("--image", "tf1.14-nccl", "--nodes", "8", "resnet50", "--system", "txgaia", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    assert "mpirun -np 16 " in last
    assert ("tf_cnn_benchmarks.py --model=resnet50_v1.5 --batch_size=" in last
            and "--variable_update=horovod --horovod_device=gpu" in last)
    assert "harness_pytorch.py" not in proc.stdout
    v1 = run_cli("run", "resnet50_v1", "--image", "tf1.14-nccl", "--system", "txgaia", "--dry-run")
    assert "--model=resnet50 " in v1.stdout


def test_workload_without_tf_cnn_model_is_refused_for_tensorflow_images(dlrun_home):
    proc = run_cli("run", "resnet18", "--image", "tf1.14-nccl", "--system", "txgaia", "--dry-run")
    assert proc.returncode == 2
    assert "workload 'resnet18' has no tf_cnn_benchmarks model" in proc.stderr
    assert "valid workloads for it: " in proc.stderr and "resnet50_v1.5" in proc.stderr
