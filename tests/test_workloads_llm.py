"""LLM pretraining as workloads of the catalog, run through `dlrun run` for real (the tiny decoder on CPUs,
1 and 2 ranks, DDP and FSDP2 over gloo): tokens/s and MFU against the stored matmul ceiling stored, an MFU
above 1 refused, checkpoints timed and stored; --dist dataparallel rendered for a GPU system and refused on
CPUs; the LLM options checked against the workload.
"""
from __future__ import annotations

import time

import pytest
from conftest import cli_json, run_cli

from dlrun.catalog import load_catalog
from dlrun.measure import matmul_record
from dlrun.paths import store_path
from dlrun.results.store import Store
from dlrun.harness import describe_llm, describe_model

TINY = ("--seq-length", "32", "--batch-size", "2", "--steps", "2", "--warmup-steps", "1", "--threads", "1",
        "--telemetry", "off")


def _store_matmul(gflops: float, precision: str = "fp32") -> None:
    """A stored `dlrun measure matmul` result of localhost: the ceiling dlrun passes to the harness."""
    run, rows = matmul_record("localhost", precision, {
        "metric": "matmul", "value": gflops, "unit": "GFLOP/s", "dtype": "float32", "size": 1024, "repeats": 1,
        "threads": 1, "device": "cpu", "framework": "pytorch", "framework_version": "2.13.0"}, now=time.time())
    Store(store_path()).add_run(run, rows)


def test_llm_workloads_are_in_the_catalog_with_their_published_counts(dlrun_home):
    catalog = load_catalog()
    for name in ("llama3_tiny", "llama3_1b", "llama3_8b"):
        work = catalog.workload(name)
        assert work.kind == "llm-pretraining" and work.trains and work.model == name
    for name in ("llama3_1b", "llama3_8b"):
        published = catalog.workload(name).published_params
        counted = describe_model(name)["params"]
        assert abs(counted - published.value) / published.value < 0.001, (name, counted, published.value)
        assert published.source.doc and published.source.where
    facts = describe_llm("llama3_1b", 2048)
    layers, heads, head_dim = facts["num_layers"], facts["heads"], facts["head_dim"]
    assert facts["flops_per_token"] == 6 * facts["matmul_params"] + 12 * layers * heads * head_dim * 2048
    shown = cli_json("workloads", "show", "llama3_8b")
    assert shown["model_facts"]["forward_macs_per"] == "token"


@pytest.mark.parametrize("dist,ranks", [("ddp", 1), ("ddp", 2), ("fsdp", 1), ("fsdp", 2)])
def test_tiny_llm_runs_and_stores_tokens_and_mfu(dlrun_home, dist, ranks):
    _store_matmul(1.0e6)  # a ceiling far above any CPU's: MFU is small and below 1
    launcher = ("--launcher", "mpirun") if ranks > 1 else ()
    proc = run_cli("run", "llama3_tiny", *TINY, "--dist", dist, "--ranks-per-node", str(ranks), *launcher)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = next(r for r in cli_json("results", "list") if r["workload"] == "llama3_tiny")
    assert (run["status"], run["unit"], run["world_size"]) == ("ok", "tokens/sec", ranks)
    shown = cli_json("results", "show", run["id"])
    rows = {r["metric"]: r for r in shown["results"]}
    extra = rows["throughput"]["extra"]
    assert extra["dist"] == dist and extra["seq_length"] == 32 and extra["matmul_gflops"] == 1.0e6
    assert extra["tokens_per_sec_per_device"] == pytest.approx(rows["throughput"]["value"] / ranks)
    assert 0 < rows["mfu_matmul"]["value"] < 1 and rows["mfu_matmul"]["unit"] == "fraction"
    assert "mfu_peak" not in rows  # a CPU has no peak in the harness's table: no number is made up
    assert shown["key"]["model"] == "llama3_tiny seq=32"
    # --threads is asked for, so the key says so (dlrun.tune: a pinned knob is part of what is compared)
    assert shown["key"]["framework"] == ("pytorch/fsdp" if dist == "fsdp" else "pytorch") + " pinned: threads=1"
    text = run_cli("results", "show", run["id"], check=True).stdout
    assert "throughput per device" in text
    compared = cli_json("compare", "--workload", "llama3_tiny")
    row = compared["rows"][0]
    assert compared["unit"] == "tokens/sec"
    assert row["of_matmul"] == pytest.approx(rows["mfu_matmul"]["value"], rel=0.05)


def test_mfu_above_one_is_refused_and_stored_failed(dlrun_home):
    _store_matmul(1.0e-3)  # a ceiling no run can stay under
    proc = run_cli("run", "llama3_tiny", *TINY)
    assert proc.returncode == 1
    run = cli_json("results", "list")[0]
    shown = cli_json("results", "show", run["id"])
    assert run["status"] == "failed" and shown["results"] == []
    assert shown["provenance"]["reason"].startswith("impossible number (MFU above 1)")


def test_checkpoints_and_accumulation_are_stored(dlrun_home, tmp_path):
    folder = tmp_path / "ckpt"
    proc = run_cli("run", "llama3_tiny", *TINY, "--checkpoint-every", "1", "--checkpoint-dir", str(folder),
                   "--grad-accum", "2", "--activation-checkpointing")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    shown = cli_json("results", "show", cli_json("results", "list")[0]["id"])
    rows = {r["metric"]: r for r in shown["results"]}
    assert rows["checkpoint_seconds"]["value"] > 0 and rows["checkpoint_seconds"]["unit"] == "s"
    assert rows["checkpoint_gbs"]["value"] > 0 and rows["checkpoint_gbs"]["unit"] == "GB/s"
    assert any(folder.iterdir())
    assert shown["key"]["global_batch"] == 4  # 2 per rank x 1 rank x 2 micro-batches
    assert shown["key"]["model"] == "llama3_tiny seq=32 activation-checkpointing"


def test_checkpoints_default_to_the_run_directory(dlrun_home):
    script = run_cli("run", "llama3_tiny", *TINY, "--checkpoint-every", "1", "--dry-run", check=True).stdout
    assert '--checkpoint-dir "${DLRUN_RUN_DIR}/checkpoints"' in script and "--checkpoint-every 1" in script


def test_dataparallel_renders_one_process_per_gpu_node_and_is_refused_on_cpus(dlrun_home):
    script = run_cli("run", "llama3_1b", "--system", "dgx-h100", "--dist", "dataparallel", "--dry-run",
                     check=True).stdout
    assert "--dist dataparallel" in script and "--expected-world-size 1" in script
    assert "dlrun-rank" not in script  # no per-rank GPU pinning: the process sees all of the node's GPUs
    cpu = run_cli("run", "llama3_tiny", "--dist", "dataparallel", "--dry-run")
    assert cpu.returncode == 2 and "valid: --dist ddp" in cpu.stderr and cpu.stderr.strip().count("\n") == 0
    many = run_cli("run", "llama3_1b", "--system", "dgx-h100", "--dist", "dataparallel", "--ranks-per-node", "8",
                   "--dry-run")
    assert many.returncode == 2 and "valid: --ranks-per-node 1" in many.stderr


@pytest.mark.parametrize("args,message", [
    (("resnet50", "--seq-length", "128"), "--seq-length applies to LLM workloads"),
    (("allreduce", "--ranks-per-node", "2", "--checkpoint-every", "2"), "--checkpoint-every applies to training"),
    (("llama3_tiny", "--checkpoint-dir", "/tmp/x"), "valid: add --checkpoint-every N"),
    (("llama3_tiny", "--checkpoint-every", "1", "--checkpoint-dir", "rel/dir"), "valid: an absolute path"),
    (("allreduce", "--ranks-per-node", "2", "--dist", "fsdp"), "--dist fsdp distributes training"),
])
def test_llm_options_outside_their_workloads_are_one_line_errors(dlrun_home, args, message):
    proc = run_cli("run", *args, "--dry-run")
    assert proc.returncode == 2 and message in proc.stderr and proc.stderr.strip().count("\n") == 0, proc.stderr
