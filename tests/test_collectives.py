"""Collectives: every harness collective through `dlrun run` on 2 local ranks (real mpirun, real gloo, real store),
the nccl-tests workloads rendered for a DGX-2 (local mpirun) and a DGX H100 Slurm cluster (golden scripts), and
the guard that refuses a collective result whose rank or host count is not the plan's (real nccl-tests logs)."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import REPO, cli_json, run_cli
from golden_files import GOLDEN as GOLDEN_ROOT, assert_golden

from dlrun.catalog import load_catalog
from dlrun.execute.record import decide_status, finish
from dlrun.execute.prerun import Cleared
from dlrun.execute.stage import stage
from dlrun.paths import runs_dir, store_path
from dlrun.plan import resolve_plan
from dlrun.probe.host import probe_host
from dlrun.render import render_job
from dlrun.results.store import Store

GOLDEN = GOLDEN_ROOT / "nccl-tests"
LOGS = Path(__file__).parent / "data" / "logs" / "nccl-tests"
COLLECTIVES = {"allreduce": ("all_reduce", 2 * (2 - 1) / 2), "broadcast": ("broadcast", 1.0),
               "allgather": ("all_gather", (2 - 1) / 2), "reducescatter": ("reduce_scatter", (2 - 1) / 2),
               "alltoall": ("alltoall", (2 - 1) / 2)}


def _small_sizes_site(tmp_path: Path) -> dict[str, str]:
    """A site catalog that keeps every built-in collective workload as it is but for its largest message
    (a site overrides a built-in entry by name): 8 B to 32 KiB, so that each run takes seconds."""
    builtin = yaml.safe_load((REPO / "recipes" / "workloads" / "comm.yaml").read_text())
    small = [dict(entry, max_bytes=32768, size_factor=8) for entry in builtin if entry["name"] in COLLECTIVES]
    site = tmp_path / "site"
    (site / "workloads").mkdir(parents=True)
    (site / "workloads" / "small.yaml").write_text(yaml.safe_dump(small))
    return {"DLRUN_PATH": str(site)}


@pytest.mark.mpi
@pytest.mark.parametrize("benchmark", sorted(COLLECTIVES))
def test_collective_runs_on_two_ranks_and_stores_bus_bandwidth(dlrun_home, tmp_path, benchmark):
    env = _small_sizes_site(tmp_path)
    proc = run_cli("run", benchmark, "--ranks-per-node", "2", "--steps", "2", "--warmup-steps", "1",
                   "--threads", "1", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "# Avg bus bandwidth    : " in proc.stdout
    (run,) = cli_json("results", "list", env=env)
    assert run["status"] == "ok" and run["unit"] == "GB/s" and run["world_size"] == 2 and run["value"] > 0
    result = cli_json("results", "show", run["id"], env=env)["results"][0]
    extra = result["extra"]
    name, factor = COLLECTIVES[benchmark]
    assert result["metric"] == "busbw" and result["num_devices"] == 2 and result["collective"] == name
    assert extra["benchmark"] == benchmark and extra["backend"] == "gloo" and extra["busbw_factor"] == factor
    whole = benchmark in ("allgather", "reducescatter", "alltoall")  # size: the whole buffer over both ranks
    assert [s["bytes"] for s in extra["sizes"]] == [8, 64, 512, 4096, 32768]
    for row in extra["sizes"]:
        assert row["wrong"] == 0 and row["time_us"] > 0
        assert row["count"] == row["bytes"] // 4 // (2 if whole else 1)
        assert row["algbw_gbs"] == pytest.approx(row["bytes"] / (row["time_us"] * 1e-6) / 1e9, rel=1e-9)
        assert row["busbw_gbs"] == pytest.approx(row["algbw_gbs"] * factor, rel=1e-12)
    assert result["value"] == extra["sizes"][-1]["busbw_gbs"]
    table = [line.split() for line in proc.stdout.splitlines() if line[:13].strip().isdigit()]
    assert [int(cells[0]) for cells in table] == [8, 64, 512, 4096, 32768]
    assert {cells[3] for cells in table} == {"sum" if benchmark in ("allreduce", "reducescatter") else "none"}

    # The same real output, judged against a plan of 2 nodes x 2 ranks: refused, whatever the collective.
    four = resolve_plan(load_catalog(host=probe_host()), benchmark, system="prace-skx8160", nodes=2,
                        ranks_per_node=2)
    output = (Path(run["run_dir"]) / "output.log").read_text()
    status, reason, _ = decide_status(four, "failed", None, 0, [output], failure=lambda: "")
    assert status == "failed" and reason == (
        f"the {name} result reported world size 2, but the plan has 4 ranks (2 node(s)); refused: a collective "
        "over other ranks than planned measures another thing")


# ------------------------------------------------------------------------------------ nccl-tests workloads
NCCL_CASES = {
    "dgx2-mpirun": dict(workload="nccl_all_reduce_perf", system="dgx2"),
    "dgx-h100-slurm": dict(workload="nccl_all_gather_perf", system="dgx-h100", nodes=2),
}


@pytest.fixture
def fixed_home(monkeypatch):
    """Rendered text must not depend on who runs the tests."""
    monkeypatch.setenv("DLRUN_HOME", "/nonexistent/dlrun-home")
    monkeypatch.setenv("XDG_CONFIG_HOME", "/nonexistent/xdg-config")
    monkeypatch.delenv("DLRUN_PATH", raising=False)
    monkeypatch.setattr("dlrun.plan.jobuser.effective_uid", lambda: 1000)  # a site's user, not root


def _nccl_plan(workload: str, system: str, **options):
    """As `dlrun run` makes it: with this site's copy of the image (pyxis gets the .sqsh file's path)."""
    from dlrun.images.verify import with_local_image

    return resolve_plan(load_catalog(host=probe_host()), workload, system=system, local_image=with_local_image,
                        **options)


@pytest.mark.parametrize("case", sorted(NCCL_CASES))
def test_nccl_tests_scripts_match_golden(fixed_home, case):
    """One process per GPU running the image's own MPI=1 nccl-tests binary, under the system's launcher."""
    options = dict(NCCL_CASES[case])
    script = render_job(_nccl_plan(options.pop("workload"), options.pop("system"), **options)).script
    assert_golden(GOLDEN / f"{case}.sh", script, what=f"the {case} script")
    last = script.strip().splitlines()[-1]
    # nccl-tests picks its own GPU (its local rank's): bound to that GPU's NUMA node, every GPU left visible
    assert "harness_pytorch.py" not in script and "dlrun-rank" in last and "export CUDA_VISIBLE_DEVICES" not in last
    if case == "dgx2-mpirun":
        assert last.startswith("exec mpirun -np 16 ") and last.endswith(
            "/usr/local/nccl-tests/all_reduce_perf -b 8 -e 134217728 -f 2 -g 1 -t 1 -n 20 -w 5 -c 1")
    else:
        assert "srun --mpi=pmix --nodes=2 --ntasks=16 --ntasks-per-node=8 " in script
        assert last.endswith("/usr/local/nccl-tests/all_gather_perf -b 8 -e 134217728 -f 2 -g 1 -t 1 -n 20 -w 5 "
                             "-c 1")


def test_nccl_tests_refused_where_they_cannot_run(dlrun_home):
    no_tests = run_cli("run", "nccl_all_reduce_perf", "--system", "dgx2", "--image", "cpu-reference", "--dry-run")
    assert no_tests.returncode == 2 and no_tests.stderr.strip().splitlines() == [
        "dlrun: error: image 'cpu-reference' has no nccl-tests, which workload 'nccl_all_reduce_perf' runs; valid "
        "images: powerai1.6, pytorch1.0-horovod, pytorch1.0-nvcr18.11, pytorch2.6-ngc24.12, tf1.14-nccl "
        "(--image NAME)"]
    torchrun = run_cli("run", "nccl_alltoall_perf", "--system", "dgx2", "--launcher", "torchrun", "--dry-run")
    assert torchrun.returncode == 2 and torchrun.stderr.strip().splitlines() == [
        "dlrun: error: workload 'nccl_alltoall_perf' runs nccl-tests (an MPI program) and cannot be started by "
        "launcher torchrun; valid: jsrun, mpirun, srun"]
    # The TensorFlow image carries nccl-tests too: its nccl-tests workloads need no tf_cnn_benchmarks model.
    tf = run_cli("run", "nccl_all_reduce_perf", "--system", "txgaia", "--nodes", "2", "--dry-run")
    assert tf.returncode == 0, tf.stderr
    assert tf.stdout.strip().splitlines()[-1].endswith("/usr/local/nccl-tests/all_reduce_perf -b 8 -e 134217728 "
                                                       "-f 2 -g 1 -t 1 -n 20 -w 5 -c 1")


# ------------------------------------------------------------------------------------ the rank-count guard
def _judge(log: str, **plan_options):
    plan = _nccl_plan("nccl_all_reduce_perf", "dgx-h100", **plan_options)
    return decide_status(plan, "failed", None, 0, [(LOGS / log).read_text()], failure=lambda: "")


def test_guard_refuses_nccl_tests_logs_whose_ranks_are_not_the_plans(fixed_home):
    # 2 ranks on 2 hosts (PerfKitBenchmarker's log) for a plan of 2 nodes x 8 GPUs
    status, reason, result = _judge("pkb_allreduce_2node.log", nodes=2)
    assert status == "failed" and result["num_devices"] == 2
    assert reason == ("the all_reduce result reported world size 2, but the plan has 16 ranks (2 node(s)); refused: "
                      "a collective over other ranks than planned measures another thing")
    # 8 GPUs of one host (one process, -g 8) for a plan of 2 nodes x 4: the rank count fits, the hosts do not
    status, reason, _ = _judge("superbench_allreduce_g8.log", nodes=2, ranks_per_node=4)
    assert status == "failed" and reason == (
        "the all_reduce result ran on 1 host(s) (localhost), but the plan has 2 node(s); refused: the traffic never "
        "crossed the planned fabric")
    # the log that fits: 16 ranks on 2 hosts
    assert _judge("a3mega_allreduce_2node.log", nodes=2)[:2] == ("ok", None)


def test_guard_refuses_one_table_per_process(fixed_home):
    """What N processes of a build without MPI=1 print: N complete one-process tests, one after another."""
    plan = _nccl_plan("nccl_all_reduce_perf", "dgx-h100", ranks_per_node=2)
    text = (LOGS / "pkb_allreduce_2node.log").read_text()
    status, reason, result = decide_status(plan, "failed", None, 0, [text + "\n" + text], failure=lambda: "")
    assert (status, result) == ("failed", None)
    assert reason == ("the job exited 0 but nccl-tests printed 2 separate result tables (of [2] rank(s) each): its "
                      "processes ran as separate tests, not as one MPI job (a build without MPI=1, or an MPI that "
                      "does not match the launcher's); refused")


def test_guard_stores_the_refused_run_as_failed(dlrun_home):
    """Through the recording path: the run is in the store, failed, with the reason, and no result row."""
    plan = _nccl_plan("nccl_all_reduce_perf", "dgx-h100", nodes=2)
    run, base, started = stage(plan, render_job(plan), runs_dir(), Cleared(inventory={}, findings=[]))
    record = finish(plan, run, Store(store_path()), status="failed", reason=None, exit_code=0, started=started,
                    base_provenance=base, result_texts=[(LOGS / "pkb_allreduce_2node.log").read_text()], tail=[],
                    failure=lambda: "")
    assert record.status == "failed" and "reported world size 2, but the plan has 16 ranks" in record.reason
    (stored,) = cli_json("results", "list", "--status", "failed")
    assert stored["id"] == record.id and stored["status"] == "failed" and stored["value"] is None
