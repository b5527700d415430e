"""The harness features the newer workloads use, on real torch and real mpirun: timed checkpoints (torch.save and
torch.distributed.checkpoint), gradient accumulation, the data-stall time and loader-only rate, the sendrecv
point-to-point benchmark, --dist dataparallel's refusal on a CPU, and the sourced peak table behind MFU."""

import json

import pytest

from dlrun.paths import HARNESS_DIR
from harness_runs import mpirun_harness as _mpirun, run_harness as _run
from dlrun.harness import load_harness

HARNESS = HARNESS_DIR / "harness_pytorch.py"
common = load_harness("pytorch", "common")
mfu = load_harness("pytorch", "mfu")


def _results(stdout):
    return [json.loads(ln[len("DLRUN_RESULT "):]) for ln in stdout.splitlines()
            if ln.startswith("DLRUN_RESULT ")]


def _errors(stderr):
    return [ln for ln in stderr.splitlines() if ln.startswith("dlrun-harness: ")]


# ----------------------------------------------------------------------------------------------- checkpoints
def test_checkpoints_are_timed_and_kept_newest_only(tmp_path):
    target = tmp_path / "ckpt"
    proc = _run(["--model", "trivial", "--batch-size", "4", "--steps", "4", "--warmup-steps", "1",
                 "--threads", "1", "--checkpoint-every", "2", "--checkpoint-dir", str(target)])
    assert proc.returncode == 0, proc.stderr
    (res,) = _results(proc.stdout)
    assert [c["step"] for c in res["checkpoints"]] == [2, 4] and res["checkpoint_count"] == 2
    assert all(c["seconds"] > 0 and c["bytes"] > 0 for c in res["checkpoints"])
    assert res["checkpoint_bytes"] == sum(c["bytes"] for c in res["checkpoints"])
    assert res["checkpoint_gbs"] == pytest.approx(res["checkpoint_bytes"] / res["checkpoint_seconds"] / 1e9)
    assert res["wall_time_excludes"] == "checkpoints"
    assert sorted(p.name for p in target.iterdir()) == ["step-4"]  # the older one removed
    saved = (target / "step-4" / "checkpoint.pt")
    assert saved.stat().st_size == res["checkpoints"][-1]["bytes"]
    import torch
    state = torch.load(saved, weights_only=True)
    assert state["step"] == 4 and set(state) == {"model", "optimizer", "step"}
    assert state["optimizer"]["state"], "the optimizer's momentum buffers are saved with the model"


@pytest.mark.parametrize("args, message", [
    (["--checkpoint-every", "2"], "--checkpoint-every and --checkpoint-dir go together; give both or neither"),
    (["--checkpoint-every", "1", "--checkpoint-dir", "/proc/dlrun-no-such-dir"],
     "--checkpoint-dir /proc/dlrun-no-such-dir: cannot write there"),
    (["--global-batch-size", "6"], "--global-batch-size 6 is not a multiple of --batch-size 4 x 1 devices = 4; "
                                   "valid: a multiple of 4"),
    (["--dist", "dataparallel"], "--dist dataparallel: torch.nn.DataParallel spreads a batch over CUDA GPUs, and "
                                 "this node has none; valid on a CPU: --dist ddp or fsdp"),
    (["--matmul-gflops", "100"], "--matmul-gflops applies to the LLM models, not to trivial"),
])
def test_bad_feature_options_are_one_line(args, message):
    proc = _run(["--model", "trivial", "--batch-size", "4", "--steps", "1", "--warmup-steps", "0",
                 "--device", "cpu"] + args)
    assert proc.returncode == common.EXIT_USAGE, proc.stderr
    assert _results(proc.stdout) == []
    (line,) = _errors(proc.stderr)
    assert line.startswith("dlrun-harness: error: " + message), line


@pytest.mark.mpi
def test_sharded_checkpoint_of_two_fsdp_ranks(tmp_path):
    target = tmp_path / "ckpt"
    proc = _mpirun(["--model", "llama3_tiny", "--seq-length", "32", "--batch-size", "2", "--steps", "2",
                    "--warmup-steps", "0", "--dist", "fsdp", "--checkpoint-every", "2",
                    "--checkpoint-dir", str(target)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (res,) = _results(proc.stdout)
    assert res["checkpoint_format"].startswith("torch.distributed.checkpoint")
    (record,) = res["checkpoints"]
    files = sorted(p.name for p in (target / "step-2").iterdir())
    assert ".metadata" in files and len([f for f in files if f.endswith(".distcp")]) == 2  # one per rank
    assert record["bytes"] == sum(p.stat().st_size for p in (target / "step-2").iterdir())
    # model + AdamW's two moments, float32: at least 3 x 4 bytes per parameter over the two ranks
    assert record["bytes"] >= 12 * res["params"]


@pytest.mark.mpi
def test_fsdp_shards_a_channels_last_cnn():
    """FSDP2 takes contiguous parameters only; a CNN in channels-last (the CPU default with oneDNN) still trains."""
    proc = _mpirun(["--model", "trivial", "--batch-size", "2", "--steps", "2", "--warmup-steps", "1",
                    "--dist", "fsdp", "--channels-last", "on", "--expected-world-size", "2"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (res,) = _results(proc.stdout)
    assert (res["dist"], res["fsdp_sharded"], res["channels_last"], res["world_size"]) == ("fsdp", True, True, 2)
    assert res["fused_optimizer"] is False  # PyTorch's fused SGD cannot step sharded parameters


# ------------------------------------------------------------------------------- accumulation and the loader
def test_accumulation_counts_every_micro_batch():
    proc = _run(["--model", "trivial", "--batch-size", "4", "--global-batch-size", "12", "--steps", "3",
                 "--warmup-steps", "1", "--threads", "1"])
    assert proc.returncode == 0, proc.stderr
    (res,) = _results(proc.stdout)
    assert (res["grad_accum"], res["global_batch_size"], res["batch_size_per_device"]) == (3, 12, 4)
    assert res["value"] == pytest.approx(12 * 3 / res["wall_time_s"], rel=1e-9)
    assert "3 micro-batches per step" in proc.stdout


def test_data_stall_and_loader_rate_on_real_images(tmp_path):
    from dlrun.datasets.synth import SynthSpec, synthesize
    data = tmp_path / "imagenet-mini"
    synthesize(SynthSpec("jpeg", images=24, classes=3, size=40), data)
    proc = _run(["--model", "trivial", "--batch-size", "4", "--steps", "3", "--warmup-steps", "1",
                 "--threads", "1", "--data-dir", str(data), "--data-workers", "1", "--loader-steps", "3"],
                timeout=300)
    assert proc.returncode == 0, proc.stderr
    (res,) = _results(proc.stdout)
    assert res["data_source"] == "jpeg" and res["loader_unit"] == "images/sec"
    assert res["loader_rate"] > 0 and res["per_rank_loader_rate"] == [res["loader_rate"]]
    assert 0 <= res["data_stall_s"] <= res["wall_time_s"]
    assert res["data_stall_fraction"] == pytest.approx(res["data_stall_s"] / res["wall_time_s"], rel=1e-9)
    synthetic = _results(_run(["--model", "trivial", "--batch-size", "4", "--steps", "2", "--warmup-steps", "0",
                               "--threads", "1"]).stdout)[0]
    assert synthetic["loader_rate"] is None and "synthetic data" in synthetic["loader_rate_is"]


# ------------------------------------------------------------------------------------------------- sendrecv
@pytest.mark.mpi
def test_sendrecv_measures_every_pair_in_both_directions():
    proc = _mpirun(["--benchmark", "sendrecv", "--min-bytes", "64", "--max-bytes", "65536", "--size-factor", "32",
                    "--steps", "3", "--warmup-steps", "1", "--expected-world-size", "3"], np=3)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (res,) = _results(proc.stdout)
    pairs = [(p["src"], p["dst"]) for p in res["pairs"]]
    assert pairs == [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)]
    for pair in res["pairs"]:
        assert [r["bytes"] for r in pair["sizes"]] == [64, 2048, 65536]
        for row in pair["sizes"]:
            assert row["wrong"] == 0 and row["gbs"] == pytest.approx(row["bytes"] / row["time_us"] / 1e3, rel=1e-9)
    largest = [p["sizes"][-1]["gbs"] for p in res["pairs"]]
    assert (res["metric"], res["unit"], res["collective"]) == ("busbw", "GB/s", "sendrecv")
    assert res["value"] == min(largest) == res["min_pair_gbs"] and res["max_pair_gbs"] == max(largest)
    assert res["value_is"].startswith("the slowest pair's bandwidth at the largest message")


@pytest.mark.mpi
def test_sendrecv_workload_through_dlrun_run(dlrun_home, tmp_path):
    """The catalog's `sendrecv` workload (a site copy with small sizes) runs, is stored and listed in GB/s."""
    import yaml
    from conftest import REPO, cli_json, run_cli
    (entry,) = [w for w in yaml.safe_load((REPO / "recipes" / "workloads" / "comm.yaml").read_text())
                if w["name"] == "sendrecv"]
    site = tmp_path / "site" / "workloads"
    site.mkdir(parents=True)
    (site / "small.yaml").write_text(yaml.safe_dump([dict(entry, max_bytes=4096, size_factor=8)]))
    env = {"DLRUN_PATH": str(tmp_path / "site")}
    proc = run_cli("run", "sendrecv", "--ranks-per-node", "2", "--steps", "2", "--warmup-steps", "1",
                   "--threads", "1", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run,) = cli_json("results", "list", env=env)
    assert (run["status"], run["unit"], run["world_size"]) == ("ok", "GB/s", 2) and run["value"] > 0
    result = cli_json("results", "show", run["id"], env=env)["results"][0]
    assert (result["metric"], result["collective"], result["num_devices"]) == ("busbw", "sendrecv", 2)
    assert [(p["src"], p["dst"]) for p in result["extra"]["pairs"]] == [(0, 1), (1, 0)]


@pytest.mark.mpi
def test_sendrecv_wrong_values_exit_6():
    proc = _mpirun(["--benchmark", "sendrecv", "--min-bytes", "64", "--max-bytes", "64", "--steps", "1",
                    "--warmup-steps", "0"], extra_env=["DLRUN_HARNESS_TEST_PERTURB_RANK=1"])
    assert proc.returncode == common.EXIT_WRONG_RESULT, proc.stdout + proc.stderr
    assert _results(proc.stdout) == []
    assert "dlrun-harness: error: sendrecv delivered wrong values: (source, destination, bytes) [(1, 0, 64)]" \
        in proc.stderr


# ------------------------------------------------------------------------------------------- the peak table
@pytest.mark.parametrize("name, precision, tflops", [
    ("NVIDIA H100 80GB HBM3", "amp", 989.5), ("NVIDIA H100 PCIe", "amp", 756.5), ("NVIDIA H100 NVL", "fp32", 60.0),
    ("NVIDIA H200", "amp", 989.5), ("NVIDIA H200 NVL", "amp", 835.5), ("NVIDIA B200", "amp", 2250.0),
    ("NVIDIA A100-SXM4-80GB", "amp", 312.0), ("AMD Instinct MI300X", "amp", 1307.4),
])
def test_peak_table_names_each_value_with_its_source(name, precision, tflops):
    value, source = mfu.device_peak(name, precision)
    assert value == tflops and ("datasheet" in source or "specifications" in source)


def test_unknown_devices_have_no_peak_and_an_mfu_above_one_fails():
    assert mfu.device_peak("NVIDIA GeForce RTX 3090", "amp") == (
        None, "NVIDIA GeForce RTX 3090 is not in the harness's peak table (no fallback to another device's peak)")
    fields = mfu.mfu_fields(6e9, 1000.0, 8, 1, "cuda", "NVIDIA GeForce RTX 3090", "amp", None)
    assert fields["mfu_peak"] is None and fields["achieved_tflops"] == pytest.approx(6.0)
    ok = mfu.mfu_fields(57914449920, 10682.0 * 8, 8, 1, "cuda", "NVIDIA H100 80GB HBM3", "amp", 800000.0)
    assert ok["mfu_peak"] == pytest.approx(57914449920 * 10682.0 / 989.5e12, rel=1e-12)
    assert ok["mfu_matmul"] == pytest.approx(57914449920 * 10682.0 / 800e12, rel=1e-12) and ok["matmul_count"] == 8
    with pytest.raises(common.HarnessError, match=r"^MFU 1\.\d+ against the nominal peak is above 1") as caught:
        mfu.mfu_fields(57914449920, 20000.0 * 8, 8, 1, "cuda", "NVIDIA H100 80GB HBM3", "amp")
    assert caught.value.code == common.EXIT_IMPOSSIBLE
