"""Tests for the in-container PyTorch benchmark harness.

Everything runs real torch on the CPU; the multi-process tests run real
``mpirun``.  The harness is an entry file plus sibling files, shipped into
containers as stand-alone scripts: the tests run the entry file as a program
and import the files by the top-level names the entry itself uses.
"""

import ast
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
from conftest import cli_json

from dlrun.paths import HARNESS_DIR, harness_files, harness_hashes
from dlrun.harness import load_harness

HARNESS = HARNESS_DIR / "harness_pytorch.py"
HARNESS_FILES = harness_files("pytorch")

entry = load_harness("pytorch")
common = load_harness("pytorch", "common")
alloc = load_harness("pytorch", "allocator")
models = load_harness("pytorch", "models")
process = load_harness("pytorch", "process")
comm = load_harness("pytorch", "comm")
collectives = load_harness("pytorch", "collectives")
features = load_harness("pytorch", "features")
train = load_harness("pytorch", "train")
contract = load_harness("pytorch", "contract")

# Reference parameter counts (torchvision; Ren et al. Table II), in millions.
TABLE_PARAMS_M = {
    "alexnet": 61.10,
    "resnet18": 11.69,
    "resnet50_v1.5": 25.56,
    "resnet50": 25.56,
    "resnet101_v1.5": 44.55,
    "resnet101": 44.55,
    "resnet152_v1.5": 60.19,
    "resnet152": 60.19,
    "vgg16": 138.36,
    "inception3": 23.83,
}
# Ren et al. Table II forward multiply-adds per image, in G.
TABLE_MACS_G = {
    "alexnet": 0.72,
    "resnet18": 1.83,
    "resnet50_v1.5": 4.14,
    "resnet101_v1.5": 7.88,
    "resnet152_v1.5": 11.62,
}


def _env(**extra):
    env = dict(os.environ)
    env.pop("DLRUN_HARNESS_TEST_PERTURB_RANK", None)
    # A test run must never pick up a surrounding launcher's layout.
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK",
                "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "SLURM_PROCID", "SLURM_NTASKS"):
        env.pop(key, None)
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONWARNINGS"] = "ignore"
    env.update(extra)
    return env


def _run(args, timeout=120, env=None):
    return subprocess.run([sys.executable, str(HARNESS)] + list(args),
                          capture_output=True, text=True, timeout=timeout,
                          env=env or _env())


def _results(stdout):
    lines = [ln for ln in stdout.splitlines() if ln.startswith("DLRUN_RESULT ")]
    return [json.loads(ln[len("DLRUN_RESULT "):]) for ln in lines]


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _mpirun(args, extra_env=(), np=2, timeout=120):
    mpirun = shutil.which("mpirun")
    assert mpirun, "mpirun not found on PATH"
    cmd = [mpirun, "-np", str(np), "--oversubscribe", "--allow-run-as-root",
           "--bind-to", "none",
           "-x", "MASTER_ADDR=127.0.0.1", "-x", "MASTER_PORT=%d" % _free_port(),
           "-x", "OMP_NUM_THREADS=1", "-x", "PYTHONWARNINGS=ignore"]
    for item in extra_env:
        cmd += ["-x", item]
    cmd += [sys.executable, str(HARNESS)] + list(args)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env=_env())


# ---------------------------------------------------------------------------
# Model definitions
# ---------------------------------------------------------------------------

IMAGE_MODELS = [n for n in models.MODEL_NAMES if not n.startswith(("bert_", "llama"))]


def test_model_names_cover_catalogue():
    assert set(models.MODEL_NAMES) == {
        "alexnet", "resnet18", "resnet34", "resnet50", "resnet101", "resnet152",
        "resnet50_v1.5", "resnet101_v1.5", "resnet152_v1.5", "vgg16",
        "inception3", "lenet", "trivial", "bert_swag", "bert_squad",
        "llama3_tiny", "llama3_1b", "llama3_8b"}
    assert [n for n in models.MODEL_NAMES if models.is_bert(n)] == ["bert_swag", "bert_squad"]
    assert models.default_image_size("inception3") == (3, 299, 299)
    assert models.default_image_size("lenet") == (3, 28, 28)
    assert models.default_image_size("resnet50") == (3, 224, 224)


@pytest.fixture(scope="module")
def described():
    return {name: models.describe_model(name) for name in models.MODEL_NAMES}


@pytest.mark.parametrize("name", sorted(TABLE_PARAMS_M))
def test_params_match_reference(described, name):
    params = described[name]["params"]
    assert round(params / 1e6, 2) == pytest.approx(TABLE_PARAMS_M[name], abs=1e-9), params


@pytest.mark.parametrize("name", sorted(TABLE_MACS_G))
def test_macs_within_two_percent_of_table(described, name):
    macs = described[name]["forward_macs"]
    ref = TABLE_MACS_G[name] * 1e9
    assert abs(macs - ref) / ref < 0.02, (name, macs)


def test_torchvision_mac_counts(described):
    # Exact counts of the torchvision definitions (conv + linear multiply-adds).
    expected_g = {"alexnet": 0.714, "resnet18": 1.814, "resnet50_v1.5": 4.089,
                  "resnet101_v1.5": 7.801, "resnet152_v1.5": 11.514,
                  "vgg16": 15.470, "inception3": 5.713}
    for name, ref in expected_g.items():
        assert described[name]["forward_macs"] / 1e9 == pytest.approx(ref, abs=0.0015), name


def test_resnet_v1_differs_from_v1_5(described):
    for depth in (50, 101, 152):
        v1 = described["resnet%d" % depth]
        v15 = described["resnet%d_v1.5" % depth]
        assert v1["params"] == v15["params"]
        # Stride on the first 1x1 convolution makes v1 cheaper: the 3x3
        # convolutions of the three downsampling blocks run at the lower
        # resolution, 0.231 G multiply-adds less at every depth.
        diff = v15["forward_macs"] - v1["forward_macs"]
        assert diff / 1e9 == pytest.approx(0.231, abs=0.001), depth
    assert described["resnet50"]["forward_macs"] / 1e9 == pytest.approx(3.86, abs=0.01)
    assert models.build_model("resnet50").layer2[0].conv1.stride == (2, 2)
    assert models.build_model("resnet50").layer2[0].conv2.stride == (1, 1)
    assert models.build_model("resnet50_v1.5").layer2[0].conv1.stride == (1, 1)
    assert models.build_model("resnet50_v1.5").layer2[0].conv2.stride == (2, 2)


def test_describe_record_shape(described):
    for name in IMAGE_MODELS:
        rec = described[name]
        assert rec["model"] == name
        assert rec["num_classes"] == 1000
        assert rec["image_size"] == list(models.default_image_size(name))
        assert isinstance(rec["params"], int) and isinstance(rec["forward_macs"], int)


@pytest.mark.parametrize("name", ["alexnet", "resnet18", "lenet", "trivial"])
def test_real_cpu_models_match_description(described, name):
    # The description may be computed without materialising weights; a real
    # model on the CPU must give the same numbers and produce 1000 logits.
    model = models.build_model(name)
    assert models.count_params(model) == described[name]["params"]
    assert models.count_forward_macs(model, models.default_image_size(name)) == described[name]["forward_macs"]
    c, hh, ww = models.default_image_size(name)
    model.eval()
    with torch.no_grad():
        out = model(torch.zeros(2, c, hh, ww))
    assert tuple(out.shape) == (2, 1000)


def test_describe_falls_back_to_real_model(monkeypatch, described):
    monkeypatch.setattr(models, "_meta_model", lambda name: None)
    assert models.describe_model("resnet18") == described["resnet18"]


def test_describe_cli_is_one_json_line():
    proc = _run(["--describe", "--model", "vgg16"])
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1
    rec = json.loads(lines[0])
    assert rec == {"model": "vgg16", "params": 138357544, "forward_macs": 15470264320,
                   "image_size": [3, 224, 224], "num_classes": 1000}


# ---------------------------------------------------------------------------
# BERT (Ren et al. Sec. III-C, Table II)
# ---------------------------------------------------------------------------

# BERT-base: embeddings (word 30522, position 512, token type 2, layer norm), 12 layers of attention
# (4 linear 768x768) and feed-forward (768x3072, 3072x768) with two layer norms, the pooler (768x768).
BERT_BASE_PARAMS = (30522 + 512 + 2 + 2) * 768 + 12 * (4 * (768 * 768 + 768) + 2 * 768
                                                      + 768 * 3072 + 3072 + 3072 * 768 + 768 + 2 * 768) + 768 * 768 + 768


def _bert_macs_per_sequence(layers, n, head_per_token=0, head_per_sequence=0):
    """Forward multiply-adds of one sequence of n tokens, by hand: per layer and token the four attention
    projections and the feed-forward layers; per layer q k^T and probabilities times v (n x n x 768 each)."""
    return (layers * n * (4 * 768 * 768 + 2 * 768 * 3072) + layers * 2 * n * n * 768
            + n * head_per_token + head_per_sequence)


def test_bert_base_has_table_ii_parameters(described):
    assert BERT_BASE_PARAMS == 109482240  # bert-base-uncased
    swag, squad = described["bert_swag"], described["bert_squad"]
    assert swag["params"] == BERT_BASE_PARAMS + 768 + 1        # one score per choice
    assert squad["params"] == BERT_BASE_PARAMS + 2 * (768 + 1)  # start and end logits
    for rec in (swag, squad):
        # Ren et al. Table II: "BERT-SWAG 109.5 M", "BERT-SQuAD 109.5 M"
        assert abs(rec["params"] - 109.5e6) / 109.5e6 <= 0.005, rec
    assert swag["trainable_params"] == swag["params"]
    assert squad["trainable_params"] == squad["params"] - (768 * 768 + 768)  # the unused pooler is frozen


def test_bert_macs_are_counted_per_sequence(described):
    swag, squad = described["bert_swag"], described["bert_squad"]
    assert (swag["task"], swag["seq_length"], swag["sequences_per_instance"]) == ("swag", 80, 4)
    assert (squad["task"], squad["seq_length"], squad["sequences_per_instance"]) == ("squad", 384, 1)
    assert swag["forward_macs_per"] == squad["forward_macs_per"] == "sequence"
    # SWAG: pooler and the choice scorer once per sequence; SQuAD: start/end logits on every token.
    assert swag["forward_macs"] == _bert_macs_per_sequence(12, 80, head_per_sequence=768 * 768 + 768) == 6913327872
    assert squad["forward_macs"] == _bert_macs_per_sequence(12, 384, head_per_token=768 * 2) == 35333406720


def test_bert_real_model_matches_description(monkeypatch, described):
    monkeypatch.setattr(models, "_meta_model", lambda name: None)
    assert models.describe_model("bert_swag") == described["bert_swag"]


def test_bert_without_fused_kernels_computes_the_same(monkeypatch):
    """The paths for PyTorch releases without F.gelu / F.scaled_dot_product_attention give the same
    outputs, with padding masked out the same way."""
    torch.manual_seed(0)
    model = models.build_model("bert_squad", num_layers=2).eval()
    ids, types, mask = models.bert_input(12, 1, batch_size=2)
    ids = torch.randint(0, 30522, ids.shape)
    mask[1, 8:] = 0  # a padded second window
    with torch.no_grad():
        fused = model(ids, types, mask)
        monkeypatch.setattr(models, "_SDPA", None)
        monkeypatch.setattr(models, "_GELU", None)
        plain = model(ids, types, mask)
    for a, b in zip(fused, plain):
        assert a.shape == (2, 12)
        assert torch.allclose(a, b, atol=1e-5), (a - b).abs().max()


def test_bert_layers_option_and_its_misuse(capsys):
    assert models.count_params(models.build_model("bert_swag", num_layers=2)) == (
        BERT_BASE_PARAMS - 10 * 7087872 + 768 + 1)
    for args, message in (
            (["--model", "trivial", "--seq-length", "8"],
             "--seq-length applies to the BERT and LLM models, not to trivial"),
            (["--model", "trivial", "--num-layers", "2"],
             "--num-layers applies to the BERT and LLM models, not to trivial"),
            (["--model", "bert_squad", "--seq-length", "513"], "--seq-length 513: BERT takes 1 to 512 tokens"),
            (["--model", "bert_swag", "--channels-last", "on"],
             "--channels-last on: model bert_swag reads tokens, not images")):
        code, out, err = _main(capsys, args + ["--steps", "1"])
        assert (code, _results(out), _error_lines(err)) == (common.EXIT_USAGE, [], ["dlrun-harness: error: " + message])


def test_synthetic_tokens():
    data = load_harness("pytorch", "data")
    (ids, types, mask), (label,) = data.synthetic_tokens(3, 10, 4, 30522, "swag", 7)
    assert ids.shape == types.shape == mask.shape == (3, 4, 10) and label.shape == (3,)
    assert 0 <= int(ids.min()) and int(ids.max()) < 30522 and 0 <= int(label.min()) and int(label.max()) < 4
    assert types[..., :5].sum() == 0 and bool((types[..., 5:] == 1).all()) and bool((mask == 1).all())
    (ids, _, _), (start, end) = data.synthetic_tokens(64, 16, 1, 30522, "squad", 7)
    assert ids.shape == (64, 16) and bool((start <= end).all()) and int(end.max()) < 16
    again = data.synthetic_tokens(64, 16, 1, 30522, "squad", 7)
    assert torch.equal(again[0][0], ids) and torch.equal(again[1][1], end)  # seeded


def _check_bert_result(res, world, batch, steps, per_instance):
    assert res["metric"] == "throughput" and res["unit"] == "sequences/sec"
    assert res["formula"] == "world_size*batch_size_per_rank*sequences_per_instance*timed_steps/wall_time_s"
    assert res["sequences_per_instance"] == per_instance and res["batch_size_per_rank"] == batch
    assert res["value"] == pytest.approx(world * batch * per_instance * steps / res["wall_time_s"], rel=1e-9)
    assert res["instances_per_sec"] == pytest.approx(res["value"] / per_instance, rel=1e-12)
    assert res["wall_time_s"] == pytest.approx(max(res["per_rank_wall_time_s"]), rel=1e-12)
    for rate, wall in zip(res["per_rank_sequences_per_sec"], res["per_rank_wall_time_s"]):
        assert rate == pytest.approx(batch * per_instance * steps / wall, rel=1e-9)
    assert res["optimizer"] == "adamw" and res["lr"] == 5e-5 and res["weight_decay"] == 0.01
    assert res["channels_last"] is False and "image_size" not in res and "per_rank_images_per_sec" not in res
    assert 0 < res["final_loss"] < 50


@pytest.mark.parametrize("model, task, per_instance", [("bert_swag", "swag", 4), ("bert_squad", "squad", 1)])
def test_bert_trains_for_real(model, task, per_instance):
    """Both tasks train on the CPU: a 2-layer BERT-base on 16-token sequences, 3 timed steps."""
    proc = _run(["--model", model, "--num-layers", "2", "--seq-length", "16", "--batch-size", "2",
                 "--steps", "3", "--warmup-steps", "1", "--display-every", "1", "--threads", "2"], timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    (res,) = _results(out)
    _check_bert_result(res, 1, 2, 3, per_instance)
    assert (res["model"], res["task"], res["seq_length"], res["num_layers"]) == (model, task, 16, 2)
    assert res["params"] == models.count_params(models.build_model(model, num_layers=2))
    for expected in ("Model:       %s" % model, "Dataset:     %s (synthetic)" % task, "Optimizer:   adamw",
                     "Step\tSeq/sec\ttotal_loss", "total sequences/sec: %.2f" % res["value"]):
        assert expected in out, expected
    assert "Data format:" not in out
    assert [ln.split("\t")[0] for ln in out.splitlines() if "\tsequences/sec: " in ln] == ["1", "2", "3"]


@pytest.mark.mpi
def test_bert_squad_two_ranks_with_the_unused_pooler():
    """SQuAD's head leaves the pooler unused: DDP over 2 ranks still trains, and the replicas agree."""
    proc = _mpirun(["--model", "bert_squad", "--num-layers", "2", "--seq-length", "16", "--batch-size", "2",
                    "--steps", "2", "--warmup-steps", "1", "--expected-world-size", "2"], timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "terminate called" not in proc.stderr
    (res,) = _results(proc.stdout)
    _check_bert_result(res, 2, 2, 2, 1)
    assert res["backend"] == "gloo" and "Variables:   ddp" in proc.stdout


def test_bert_workloads_in_the_catalog(dlrun_home):
    for name, per_instance in (("bert_swag", 4), ("bert_squad", 1)):
        shown = cli_json("workloads", "show", name)
        assert shown["kind"] == "bert-finetuning" and shown["model"] == name
        published = shown["published_params"]
        assert published["value"] == 109.5e6 and published["source"]["where"] == "Table II"
        assert "0.19 G" in published["source"]["note"] or "2.87 G" in published["source"]["note"]
        assert shown["published_ops_per_image"] is None  # Table II's BERT ops are not comparable
        facts = shown["model_facts"]
        assert abs(facts["params"] - published["value"]) / published["value"] <= 0.005
        assert facts["sequences_per_instance"] == per_instance


# ---------------------------------------------------------------------------
# Pure helpers
# ---------------------------------------------------------------------------

def test_perf_stats_and_replica_tolerance():
    rate, err, jitter = train.perf_stats(10, [0.1, 0.1, 0.1])
    assert rate == pytest.approx(100.0) and err == pytest.approx(0.0) and jitter == pytest.approx(0.0)
    rate, err, jitter = train.perf_stats(10, [0.1, 0.2])
    assert rate == pytest.approx(20 / 0.3)
    assert err == pytest.approx(25.0 / 2 ** 0.5)
    assert jitter == pytest.approx(1.4826 * 25.0)
    assert train.replicas_agree([1.0, 100.0], [1.0, 100.0])
    assert train.replicas_agree([1.0, 100.0], [1.0 + 1e-5, 100.0])
    assert not train.replicas_agree([1.0, 100.0], [1.001, 100.0])


# ---------------------------------------------------------------------------
# Feature guards for old PyTorch releases
# ---------------------------------------------------------------------------

def _fake_torch(**attrs):
    return types.SimpleNamespace(**attrs)


def test_guards_on_a_torch_without_new_features():
    old = _fake_torch(float16=torch.float16, cuda=types.SimpleNamespace(),
                      backends=types.SimpleNamespace())
    cpu_amp = "^--precision amp: this PyTorch has no CPU bfloat16 autocast"
    with pytest.raises(common.HarnessError, match=cpu_amp) as exc:
        features.resolve_amp("cpu", old)
    assert exc.value.code == common.EXIT_USAGE
    with pytest.raises(common.HarnessError, match=r"^--precision amp: this PyTorch has no CUDA autocast \(torch"):
        features.resolve_amp("cuda", old)
    with pytest.raises(common.HarnessError, match="^--precision amp: this PyTorch has no GradScaler$"):
        features.make_grad_scaler(old)
    assert features.resolve_channels_last("auto", "amp", "cuda", old) is False
    with pytest.raises(common.HarnessError, match="^--channels-last on: this PyTorch has no torch.channels_last$"):
        features.resolve_channels_last("on", "fp32", "cpu", old)
    model = torch.nn.Linear(2, 2)
    assert features.maybe_compile(model, True, old) == (model, False)
    assert features.mkldnn_available(old) is False


def test_guards_pick_intermediate_apis():
    calls = []

    class LegacyAutocast(object):
        def __init__(self):
            calls.append("autocast")

    class LegacyScaler(object):
        pass

    mid = _fake_torch(float16=torch.float16,
                      cuda=types.SimpleNamespace(amp=types.SimpleNamespace(
                          autocast=LegacyAutocast, GradScaler=LegacyScaler)))
    factory, dtype, scaler = features.resolve_amp("cuda", mid)
    factory()
    assert (dtype, scaler, calls) == ("float16", True, ["autocast"])
    assert isinstance(features.make_grad_scaler(mid), LegacyScaler)


@pytest.fixture
def tf32_flags():
    """torch's TF32 switches, restored after the test (they exist on a CPU build too)."""
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def test_fp32_on_cuda_turns_tf32_off_and_tf32_turns_it_on(tf32_flags):
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True  # cuDNN's own default
    factory, ran, scaler, tf32 = features.resolve_precision("fp32", "cuda")
    assert (factory, ran, scaler, tf32) == (None, "float32", False, {"matmul": False, "cudnn": False})
    assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
    factory, ran, scaler, tf32 = features.resolve_precision("tf32", "cuda")
    assert (factory, ran, tf32) == (None, "tf32", {"matmul": True, "cudnn": True})
    assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    assert features.resolve_precision("fp32", "cpu")[3] == {}  # no TF32 on a CPU: nothing set, nothing claimed


@pytest.mark.parametrize("precision,device,dtype,scaler", [
    ("fp16", "cuda", "float16", True), ("bf16", "cuda", "bfloat16", False), ("amp", "cuda", "float16", True),
    ("bf16", "cpu", "bfloat16", False), ("amp", "cpu", "bfloat16", False)])
def test_each_precision_runs_the_type_it_names(tf32_flags, precision, device, dtype, scaler):
    factory, ran, needs_scaler, _ = features.resolve_precision(precision, device)
    assert (ran, needs_scaler) == (dtype, scaler) and factory is not None
    assert contract.PRECISION_OF_DTYPE[ran] == {"float16": "fp16", "bfloat16": "bf16"}[dtype]


def test_an_llm_trains_amp_in_bfloat16_on_a_gpu_too(tf32_flags):
    """The contract's one amp rule: float16 on a GPU, except for the LLMs, which train in bfloat16 everywhere."""
    assert features.resolve_precision("amp", "cuda", kind=contract.LLM_KIND)[1:3] == ("bfloat16", False)
    assert features.resolve_precision("amp", "cuda")[1:3] == ("float16", True)


@pytest.mark.parametrize("precision", ["tf32", "fp16"])
def test_gpu_only_precisions_are_refused_on_a_cpu(precision):
    with pytest.raises(common.HarnessError, match="^--precision %s" % precision) as exc:
        features.resolve_precision(precision, "cpu")
    assert exc.value.code == common.EXIT_USAGE


def test_native_bf16_is_read_from_the_cpu_flags(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse avx512f avx512_bf16 amx_tile\n")
    assert common.cpu_has_native_bf16(str(cpuinfo)) is True
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse avx2 avx512f\n")
    assert common.cpu_has_native_bf16(str(cpuinfo)) is False
    cpuinfo.write_text("Features\t: fp asimd bf16 i8mm\n")  # an Arm core
    assert common.cpu_has_native_bf16(str(cpuinfo)) is True
    assert common.cpu_has_native_bf16(str(tmp_path / "absent")) is None


def test_a_bf16_run_records_what_ran():
    proc = _run(["--model", "trivial", "--batch-size", "4", "--steps", "2", "--warmup-steps", "1",
                 "--precision", "bf16", "--device", "cpu"])
    assert proc.returncode == 0, proc.stderr
    res = _results(proc.stdout)[0]
    native = common.cpu_has_native_bf16()
    assert (res["precision"], res["precision_ran"], res["amp_dtype"], res["tf32"]) == ("bf16", "bf16", "bfloat16", {})
    assert res["native_bf16"] is native
    assert ("without bfloat16 instructions" in proc.stderr) is (native is False)


def test_guards_use_features_of_current_torch(tmp_path, monkeypatch):
    factory, dtype, scaler = features.resolve_amp("cpu")
    assert (dtype, scaler) == ("bfloat16", False)
    with factory():
        y = torch.nn.Linear(4, 4)(torch.randn(2, 4))
    assert y.dtype == torch.bfloat16
    # fp32 on CPU: NHWC where oneDNN trains it and it was measured to win on this processor kind (a Zen 4 here)
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("vendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n")
    monkeypatch.setenv("DLRUN_HARNESS_TEST_CPUINFO", str(cpuinfo))
    assert features.resolve_channels_last("auto", "fp32", "cpu") is features.mkldnn_available()
    no_onednn = _fake_torch(channels_last=torch.channels_last,
                            backends=types.SimpleNamespace())
    assert features.resolve_channels_last("auto", "fp32", "cpu", no_onednn) is False
    assert features.resolve_channels_last("off", "fp32", "cpu") is False
    assert features.resolve_channels_last("auto", "amp", "cpu") is False  # not measured for amp
    cpuinfo.write_text("vendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n")
    assert features.resolve_channels_last("auto", "fp32", "cpu") is False  # not measured there: the reference
    assert features.resolve_channels_last("auto", "fp32", "cuda") is True
    assert features.resolve_channels_last("off", "amp", "cuda") is False
    assert features.mkldnn_available() == bool(torch.backends.mkldnn.is_available())


def _main(capsys, args):
    """Run the harness entry point in this process; (exit code, out, err)."""
    try:
        code = entry.main(list(args))
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _error_lines(err):
    return [ln for ln in err.splitlines() if ln.startswith("dlrun-harness: ")]


def test_run_without_channels_last_compile_and_mkldnn(monkeypatch, capsys):
    # Real torch with the newer features removed, as on an old release.
    monkeypatch.delattr(torch, "channels_last")
    monkeypatch.delattr(torch, "compile")
    monkeypatch.setattr(torch.backends, "mkldnn", types.SimpleNamespace())
    code, out, err = _main(capsys, [
        "--model", "trivial", "--batch-size", "4", "--steps", "2",
        "--warmup-steps", "1", "--precision", "amp", "--compile"])
    assert code == 0, err
    (res,) = _results(out)
    assert res["precision"] == "amp" and res["amp_dtype"] == "bfloat16"
    assert res["channels_last"] is False and res["data_format"] == "NCHW"
    assert res["compiled"] is False and res["mkldnn"] is False
    assert _error_lines(err) == [
        "dlrun-harness: warning: --compile: this PyTorch has no torch.compile; running eagerly"]
    code, out, err = _main(capsys, ["--model", "trivial", "--steps", "1",
                                    "--channels-last", "on"])
    assert code == 2 and _results(out) == []
    assert _error_lines(err) == [
        "dlrun-harness: error: --channels-last on: this PyTorch has no torch.channels_last"]


def test_amp_without_autocast_is_a_clear_error(monkeypatch, capsys):
    monkeypatch.delattr(torch, "autocast")
    code, out, err = _main(capsys, ["--model", "trivial", "--steps", "1",
                                    "--precision", "amp"])
    assert code == 2 and _results(out) == []
    (line,) = _error_lines(err)
    assert line.startswith("dlrun-harness: error: --precision amp") and "autocast" in line


def _vermin(*paths):
    # vermin is a test dependency: a missing vermin fails the test.
    return subprocess.run(
        [sys.executable, "-c", "import sys, vermin; sys.exit(vermin.main())",
         "-t=3.6-", "--no-tips", "--violations", *map(str, paths)],
        capture_output=True, text=True, timeout=120)


def test_syntax_floor_python36(tmp_path):
    proc = _vermin(*HARNESS_FILES)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The same invocation does reject a file that needs Python 3.8.
    newer = tmp_path / "walrus.py"
    newer.write_text("if (n := 1):\n    pass\n")
    assert _vermin(HARNESS, newer).returncode != 0


def _imported_roots(path):
    roots = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("path", HARNESS_FILES, ids=[p.name for p in HARNESS_FILES])
def test_harness_imports_only_stdlib_torch_and_its_siblings(path):
    siblings = {p.stem for p in HARNESS_FILES}
    roots = _imported_roots(path)
    assert "dlrun" not in roots
    # Horovod only in the file that imports it for --dist horovod (inside a function: importing the file
    # does not need it, see test_each_sibling_imports_alone_without_side_effects). Reading real data
    # (--data-dir) decodes with Pillow and checks TFRecords with the crc32c package where it is installed:
    # both imported only when data is read, and the harness says so where Pillow is missing.
    optional = ({"horovod"} if path.name == "harness_pytorch_horovod.py" else
                {"PIL", "crc32c"} if path.stem in ("harness_pytorch_dataset", "harness_pytorch_tfrecord") else set())
    assert not roots - set(sys.stdlib_module_names) - {"torch"} - optional - siblings, roots


def test_harness_files_are_the_entry_and_every_sibling():
    names = [p.name for p in HARNESS_FILES]
    assert names[0] == "harness_pytorch.py" and names[1:] == sorted(names[1:])
    on_disk = sorted(p.name for p in HARNESS_DIR.glob("*.py") if p.name != "__init__.py")
    assert sorted({*names, *(p.name for p in harness_files("tensorflow"))}) == on_disk
    # the shared parts, shipped with both frameworks' harnesses (a fix there reaches both)
    for shared in ("harness_common.py", "harness_contract.py", "harness_ranks.py", "harness_result_schema.py"):
        assert shared in names and shared in [p.name for p in harness_files("tensorflow")]
    assert {"harness_pytorch_models.py", "harness_pytorch_comm.py", "harness_pytorch_train.py",
            "harness_pytorch_data.py"} <= set(names)
    assert harness_files("tensorflow")[0].name == "harness_tensorflow.py"  # TF 2 (TF 1.x runs tf_cnn_benchmarks)
    # The entry's notes name every sibling, so that a reader of the shipped file finds them all.
    for name in names[1:]:
        assert "``%s``" % name in entry.__doc__, name
    # Only the model definitions may exceed the package's module size limit.
    long = [p.name for p in HARNESS_FILES if len(p.read_text().splitlines()) > 400]
    assert long in ([], ["harness_pytorch_models.py"]), long


_IMPORT_ALONE = """
import json, os, sys
sys.path.insert(0, sys.argv[1])
path, env = list(sys.path), dict(os.environ)
import importlib
importlib.import_module(sys.argv[2])
torch_loaded = "torch" in sys.modules
import torch
print(json.dumps({"path": sys.path == path, "env": dict(os.environ) == env, "torch_loaded": torch_loaded,
                  "threads": torch.get_num_threads(),
                  "dlrun": sorted(m for m in sys.modules if m.split(".")[0] == "dlrun")}))
"""


def _unthreaded_env():
    env = _env()
    del env["OMP_NUM_THREADS"]  # torch's own choice, which an import must not change
    return env


@pytest.fixture(scope="module")
def default_threads():
    proc = subprocess.run([sys.executable, "-I", "-c", "import torch; print(torch.get_num_threads())"],
                          capture_output=True, text=True, timeout=120, env=_unthreaded_env())
    return int(proc.stdout)


@pytest.mark.parametrize("path", HARNESS_FILES[1:], ids=[p.name for p in HARNESS_FILES[1:]])
def test_each_sibling_imports_alone_without_side_effects(path, default_threads):
    """A fresh interpreter (-I: no cwd, no user site) imports the sibling by itself: it leaves sys.path,
    the environment (no re-exec, no LD_PRELOAD) and torch's threads as they were, and the four standard
    library parts do not even import torch."""
    proc = subprocess.run([sys.executable, "-I", "-c", _IMPORT_ALONE, str(HARNESS_DIR), path.stem],
                          capture_output=True, text=True, timeout=120, env=_unthreaded_env())
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert seen["path"] and seen["env"] and seen["dlrun"] == []
    assert seen["threads"] == default_threads
    stdlib_only = path.stem in ("harness_common", "harness_contract", "harness_node", "harness_ranks",
                                "harness_result_schema",
                                "harness_pytorch_allocator",
                                "harness_pytorch_knobs", "harness_pytorch_tfrecord", "harness_pytorch_mfu",
                                "harness_pytorch_args", "harness_pytorch_storage")
    assert seen["torch_loaded"] is not stdlib_only


def test_entry_runs_from_any_directory_in_isolated_mode(tmp_path):
    """`python -I` puts neither the script's directory nor the cwd on sys.path: the entry does."""
    proc = subprocess.run([sys.executable, "-I", str(HARNESS), "--describe", "--model", "lenet"],
                          capture_output=True, text=True, timeout=120, env=_env(), cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["model"] == "lenet"


# ---------------------------------------------------------------------------
# Shipped, bound and hashed together
# ---------------------------------------------------------------------------

def test_every_image_ships_the_harness_files_of_its_framework():
    from dlrun.images.spec import spec_files

    specs = {name: sf.spec for name, sf in spec_files().items()}
    assert {"cpu-reference", "pytorch1.0-nvcr18.11", "tf1.14-nccl"} <= set(specs)
    runs_tf_cnn = {"tf1.14-nccl", "tf1.8-cuda9"}  # TensorFlow 1.x images run tf_cnn_benchmarks, no dlrun harness
    assert runs_tf_cnn <= set(specs)
    for name, spec in specs.items():
        expected = [] if name in runs_tf_cnn else [p.name for p in harness_files(spec.framework)]
        assert spec.harness.files == expected, name


def test_harness_digest_covers_every_file(tmp_path):
    digest, per_file = harness_hashes(HARNESS_DIR, "pytorch")
    assert sorted(per_file) == sorted(p.name for p in HARNESS_FILES)
    for path in HARNESS_FILES:
        assert per_file[path.name] == hashlib.sha256(path.read_bytes()).hexdigest()
    listing = "".join("%s  %s\n" % (per_file[name], name) for name in sorted(per_file))
    assert digest == hashlib.sha256(listing.encode()).hexdigest()
    # A change to any one file changes the digest; a missing file leaves none.
    for path in HARNESS_FILES:
        shutil.copy(path, tmp_path / path.name)
    assert harness_hashes(tmp_path, "pytorch")[0] == digest
    (tmp_path / "harness_pytorch_data.py").write_text("# changed\n")
    assert harness_hashes(tmp_path, "pytorch")[0] not in (None, digest)
    (tmp_path / "harness_pytorch_data.py").unlink()
    assert harness_hashes(tmp_path, "pytorch") == (None, {**{p.name: per_file[p.name] for p in HARNESS_FILES},
                                                          "harness_pytorch_data.py": None})


def test_debootstrap_top_layer_carries_every_harness_file():
    from dlrun.images.debootstrap import top_layer_files
    from dlrun.images.spec import spec_files

    spec_file = spec_files()["cpu-reference"]
    base = {"packages": {"python3-torch": "1.13.1"}, "diff_id": "sha256:" + "0" * 64}
    layer = {f.path: f for f in top_layer_files(spec_file, "x86_64", base)}
    meta = json.loads(layer["etc/dlrun/image.json"].data)
    for path in HARNESS_FILES:
        shipped = layer["opt/dlrun/" + path.name]
        assert shipped.data == path.read_bytes() and shipped.mode == 0o644
        assert meta["harness"][path.name] == "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


# ---------------------------------------------------------------------------
# Real benchmark runs
# ---------------------------------------------------------------------------

def _check_result_arithmetic(res, world, batch, steps):
    assert res["world_size"] == world and res["num_devices"] == world
    assert res["batch_size_per_rank"] == batch
    assert res["global_batch_size"] == world * batch
    assert res["timed_steps"] == steps
    assert res["formula"] == "world_size*batch_size_per_rank*timed_steps/wall_time_s"
    assert res["wall_time_reduction"] == "max_over_ranks"
    assert res["value"] == pytest.approx(world * batch * steps / res["wall_time_s"], rel=1e-9)
    assert len(res["per_rank_images_per_sec"]) == world
    assert res["wall_time_s"] == pytest.approx(max(res["per_rank_wall_time_s"]), rel=1e-12)
    for rate, wall in zip(res["per_rank_images_per_sec"], res["per_rank_wall_time_s"]):
        assert rate == pytest.approx(batch * steps / wall, rel=1e-9)
    assert res["value"] <= sum(res["per_rank_images_per_sec"]) * (1 + 1e-9)


def _channels_last_by_default() -> bool:
    """Whether channels-last is `auto`'s choice on this CPU, as the harness decides it: where it was measured to
    win on this processor kind (harness_contract.MEASURED_WINS; a Zen 4 or 5, not an Intel Xeon) and oneDNN is
    there."""
    return features.resolve_channels_last("auto", "fp32", "cpu")


def test_single_process_run():
    proc = _run(["--model", "trivial", "--batch-size", "8", "--steps", "12",
                 "--warmup-steps", "2", "--display-every", "5", "--threads", "1",
                 "--data-workers", "2"])
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for expected in ("Model:       trivial", "Dataset:     imagenet (synthetic)",
                     "Mode:        training", "Batch size:  8 global", "8 per device",
                     "Num batches: 12", "Devices:     ['/cpu:0']",
                     "Data format: %s" % ("NHWC" if _channels_last_by_default() else "NCHW"),
                     "Optimizer:   sgd", "Variables:   replicated", "Running warm up",
                     "Done warm up", "Step\tImg/sec\ttotal_loss"):
        assert expected in out, expected
    rows = [ln.split("\t")[0] for ln in out.splitlines() if "\timages/sec: " in ln]
    assert rows == ["1", "5", "10", "12"]  # the last step's row too: the rate over all 12
    (res,) = _results(out)
    assert out.splitlines()[-1].startswith("DLRUN_RESULT ")
    assert ("total images/sec: %.2f" % res["value"]) in out
    _check_result_arithmetic(res, 1, 8, 12)
    assert res["metric"] == "throughput" and res["unit"] == "images/sec"
    assert res["status"] == "ok" and res["framework"] == "pytorch"
    assert res["framework_version"] == torch.__version__
    assert res["model"] == "trivial" and res["params"] == 9232
    assert res["warmup_steps"] == 2 and res["threads"] == 1
    assert res["precision"] == "fp32"
    assert res["channels_last"] is _channels_last_by_default()
    assert res["device"] == "cpu" and res["backend"] == "none"
    assert res["data_workers"] == 2 and res["rank_source"] == "single"
    assert res["final_loss"] > 0 and res["python_version"]


def test_amp_cpu_bf16_run(capsys):
    code, out, err = _main(capsys, ["--model", "trivial", "--batch-size", "4",
                                    "--steps", "3", "--warmup-steps", "1",
                                    "--precision", "amp"])
    assert code == 0, err
    (res,) = _results(out)
    _check_result_arithmetic(res, 1, 4, 3)
    assert res["precision"] == "amp" and res["amp_dtype"] == "bfloat16"
    # NHWC was never measured against NCHW for amp on a CPU, so auto keeps PyTorch's layout there
    assert res["channels_last"] is False and "Data format: NCHW" in out


def test_expected_world_size_mismatch(capsys):
    code, out, err = _main(capsys, ["--model", "trivial", "--steps", "1",
                                    "--expected-world-size", "3"])
    assert code == 3
    assert _results(out) == []
    (line,) = _error_lines(err)
    assert line.startswith("dlrun-harness: error: expected world size 3 but found 1")


def test_nonfinite_loss_exits_5(capsys):
    code, out, err = _main(capsys, ["--model", "trivial", "--steps", "2",
                                    "--warmup-steps", "2", "--lr", "1e30"])
    assert code == 5
    assert _results(out) == []
    (line,) = _error_lines(err)
    assert line.startswith("dlrun-harness: error: loss is not finite")


def test_bad_option_is_one_line(capsys):
    code, out, err = _main(capsys, ["--model", "resnet9000"])
    assert code == 2 and out == ""
    assert err.splitlines() == [ln for ln in err.splitlines() if ln]
    (line,) = err.splitlines()
    assert line.startswith("dlrun-harness: error: argument --model: invalid choice")


@pytest.mark.mpi
def test_two_rank_mpirun():
    proc = _mpirun(["--model", "trivial", "--batch-size", "4", "--steps", "6",
                    "--warmup-steps", "1", "--display-every", "3",
                    "--expected-world-size", "2"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "terminate called" not in proc.stderr
    results = _results(proc.stdout)
    assert len(results) == 1
    assert proc.stdout.count("Model:       trivial") == 1  # rank 0 only
    res = results[0]
    _check_result_arithmetic(res, 2, 4, 6)
    assert res["backend"] == "gloo" and res["rank_source"] == "openmpi"
    assert "Variables:   ddp" in proc.stdout
    assert "Devices:     ['/cpu:0', '/cpu:0']" in proc.stdout


@pytest.mark.mpi
def test_two_rank_divergence_is_detected():
    proc = _mpirun(["--model", "trivial", "--batch-size", "4", "--steps", "2",
                    "--warmup-steps", "1"],
                   extra_env=["DLRUN_HARNESS_TEST_PERTURB_RANK=1"])
    # Open MPI's mpirun passes on the first non-zero exit status.
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert _results(proc.stdout) == []
    assert "dlrun-harness: error: replicas diverged" in proc.stderr
    assert "terminate called" not in proc.stderr


# ----------------------------------------------------------------------------- memory allocator
# CI installs libtcmalloc-minimal4 and libjemalloc2 (Makefile APT_PACKAGES): these tests preload the real ones.

def _fake_find(found):
    return lambda name: found.get(name)


def test_plan_allocator_decisions():
    tc, je = "/usr/lib/x/libtcmalloc_minimal.so.4", "/usr/lib/x/libjemalloc.so.2"
    both = _fake_find({"tcmalloc": tc, "jemalloc": je})
    only_je = _fake_find({"jemalloc": je})
    none = _fake_find({})
    assert alloc.plan_allocator("auto", None, both) == ("exec", "tcmalloc", tc)
    assert alloc.plan_allocator("auto", None, only_je) == ("exec", "jemalloc", je)
    assert alloc.plan_allocator("auto", None, none) == ("use", "glibc-tuned", None)
    assert alloc.plan_allocator("jemalloc", None, both) == ("exec", "jemalloc", je)
    # after the re-exec, or imported as a module: never exec again
    assert alloc.plan_allocator("auto", None, both, reexeced=True) == ("use", "glibc-tuned", None)
    assert alloc.plan_allocator("auto", None, both, can_exec=False) == ("use", "glibc-tuned", None)
    # already loaded (the re-exec worked, or the user preloaded one): kept
    assert alloc.plan_allocator("auto", "jemalloc", both) == ("use", "jemalloc", None)
    assert alloc.plan_allocator("tcmalloc", "tcmalloc", none) == ("use", "tcmalloc", None)
    assert alloc.plan_allocator("system", None, both) == ("use", "system", None)
    assert alloc.plan_allocator("glibc-tuned", None, both) == ("use", "glibc-tuned", None)


@pytest.mark.parametrize("requested, loaded, find, kwargs, message", [
    ("tcmalloc", None, {}, {}, "--allocator tcmalloc: no libtcmalloc shared library found in"),
    ("jemalloc", None, {}, {}, "install libjemalloc2 or use --allocator auto|glibc-tuned|system"),
    ("tcmalloc", "jemalloc", {}, {}, "--allocator tcmalloc: jemalloc is already loaded"),
    ("system", "tcmalloc", {}, {}, "unset LD_PRELOAD or use --allocator auto|tcmalloc"),
    ("tcmalloc", None, {"tcmalloc": "/l/libtcmalloc_minimal.so.4"}, {"reexeced": True},
     "preloading it did not take effect"),
    ("tcmalloc", None, {"tcmalloc": "/l/libtcmalloc_minimal.so.4"}, {"can_exec": False},
     "LD_PRELOAD=/l/libtcmalloc_minimal.so.4"),
])
def test_plan_allocator_refuses_what_it_cannot_do(requested, loaded, find, kwargs, message):
    with pytest.raises(common.HarnessError, match=re.escape(message)) as err:
        alloc.plan_allocator(requested, loaded, _fake_find(find), **kwargs)
    assert err.value.code == common.EXIT_USAGE


def test_allocator_detection_and_lookup(tmp_path):
    maps = ("7f00-7f01 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4.5.10\n"
            "7f02-7f03 r-xp 0 08:01 2 /usr/lib/x86_64-linux-gnu/libc.so.6\n")
    assert alloc.loaded_allocator(maps) == "tcmalloc"
    assert alloc.loaded_allocator(maps.replace("tcmalloc_minimal.so.4.5.10", "jemalloc.so.2")) == "jemalloc"
    assert alloc.loaded_allocator("7f02-7f03 r-xp 0 08:01 2 /usr/lib/libc.so.6\n") is None
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "libjemalloc.so.2").write_bytes(b"")
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    assert alloc.find_allocator("jemalloc", dirs) == str(tmp_path / "b" / "libjemalloc.so.2")
    assert alloc.find_allocator("tcmalloc", dirs) is None
    assert str(Path(sys.prefix) / "lib") in alloc.library_dirs()
    assert alloc.argv_allocator(["--model", "x", "--allocator", "jemalloc"]) == "jemalloc"
    assert alloc.argv_allocator(["--allocator=system"]) == "system"
    assert alloc.argv_allocator(["--model", "x"]) == "auto"
    assert alloc.argv_allocator(["--describe", "--allocator", "tcmalloc"]) is None
    assert alloc.argv_allocator(["--allocator", "bogus"]) is None  # argparse reports it


def test_setup_allocator_reexecs_with_preload_and_restores_children_env(monkeypatch):
    monkeypatch.setattr(alloc, "mapped_allocator", lambda maps_text=None: (None, None))
    monkeypatch.setattr(alloc, "find_allocator", lambda name, dirs=None: {
        "jemalloc": "/opt/lib/libjemalloc.so.2"}.get(name))
    calls = []
    environ = {"LD_PRELOAD": "/site/libhook.so", "PATH": "/bin"}
    alloc.setup_allocator("auto", True, environ=environ, execve=lambda *a: calls.append(a))
    ((exe, argv, env),) = calls
    assert exe == sys.executable and argv[0] == sys.executable
    assert env["LD_PRELOAD"] == "/opt/lib/libjemalloc.so.2:/site/libhook.so"
    assert env["MALLOC_CONF"] == alloc.JEMALLOC_CONF and env[alloc.REEXEC_ENV] == "/site/libhook.so"
    # in the re-executed process: the user's LD_PRELOAD is what children see
    monkeypatch.setattr(alloc, "mapped_allocator", lambda maps_text=None: ("jemalloc", "/opt/lib/libjemalloc.so.2"))
    state = alloc.setup_allocator("auto", True, environ=env, execve=lambda *a: calls.append(a))
    assert len(calls) == 1 and state == {"name": "jemalloc", "library": "/opt/lib/libjemalloc.so.2"}
    assert env["LD_PRELOAD"] == "/site/libhook.so" and alloc.REEXEC_ENV not in env


def test_tune_glibc_malloc_applies():
    assert alloc.tune_glibc_malloc() is True  # Debian's glibc has mallopt


@pytest.mark.parametrize("requested, library", [("auto", "libtcmalloc_minimal.so.4"),
                                                ("tcmalloc", "libtcmalloc_minimal.so.4"),
                                                ("jemalloc", "libjemalloc.so.2"),
                                                ("glibc-tuned", None), ("system", None)])
def test_allocator_really_loaded(requested, library):
    """Run as a program, the harness re-executes itself with the allocator preloaded and records it."""
    env = _env()
    env.pop("LD_PRELOAD", None)
    proc = _run(["--model", "trivial", "--batch-size", "2", "--steps", "1", "--warmup-steps", "0",
                 "--allocator", requested], env=env)
    assert proc.returncode == 0, proc.stderr
    (res,) = _results(proc.stdout)
    expected = "tcmalloc" if requested == "auto" else requested
    assert res["allocator"] == expected
    if library:
        assert Path(res["allocator_library"]).name.startswith(library)
        assert "Allocator:   %s (%s)" % (expected, res["allocator_library"]) in proc.stdout
    else:
        assert res["allocator_library"] is None and "Allocator:   %s\n" % expected in proc.stdout


def test_allocator_clash_with_user_preload_is_one_line():
    jemalloc = alloc.find_allocator("jemalloc")
    proc = _run(["--model", "trivial", "--steps", "1", "--allocator", "tcmalloc"],
                env=_env(LD_PRELOAD=jemalloc))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "dlrun-harness: error: --allocator tcmalloc: jemalloc is already loaded (LD_PRELOAD=%r); "
        "unset LD_PRELOAD or use --allocator auto|jemalloc" % jemalloc]


# ----------------------------------------------------------------------------- all-reduce benchmark

def test_message_sizes_and_bus_bandwidth():
    sizes = collectives.message_sizes
    assert sizes(8, 64) == [8, 16, 32, 64]
    assert sizes(1024, 1 << 20, 8) == [1024, 8192, 65536, 524288]
    assert sizes(10, 40) == [8, 20, 40]  # whole float32 elements
    # all-gather, reduce-scatter, all-to-all: whole blocks of one element per rank, repeats dropped
    assert sizes(8, 64, 2, 3) == [12, 24, 60]
    for bad in ((2, 8, 2), (64, 8, 2), (8, 64, 1)):
        with pytest.raises(common.HarnessError, match=r"^message sizes: need 4 <= --min-bytes <= --max-bytes and "
                                                      r"--size-factor >= 2, got %d, %d, %d$" % bad):
            sizes(*bad)
    algbw, busbw = collectives.bus_bandwidth(1e9, 0.5, 2)
    assert algbw == pytest.approx(2.0) and busbw == pytest.approx(2.0)  # 2 ranks: factor 2*(1)/2 = 1
    assert collectives.bus_bandwidth(1e9, 0.5, 8)[1] == pytest.approx(2.0 * 2 * 7 / 8)
    # nccl-tests' doc/PERFORMANCE.md factors
    factors = {b: collectives.busbw_factor(b, 8) for b in collectives.BENCHMARKS}
    assert factors == {"allreduce": 2 * 7 / 8, "broadcast": 1.0, "allgather": 7 / 8, "reducescatter": 7 / 8,
                       "alltoall": 7 / 8, "sendrecv": 1.0}


def test_allreduce_needs_two_ranks(capsys):
    code, out, err = _main(capsys, ["--benchmark", "allreduce", "--max-bytes", "64"])
    assert code == common.EXIT_USAGE and _results(out) == []
    assert _error_lines(err) == ["dlrun-harness: error: --benchmark allreduce needs at least 2 ranks, found 1; "
                                 "start it with 2 or more processes (e.g. mpirun -np 2, torchrun "
                                 "--nproc-per-node 2)"]


@pytest.mark.mpi
def test_two_rank_allreduce_sweep():
    proc = _mpirun(["--benchmark", "allreduce", "--min-bytes", "8", "--max-bytes", "65536",
                    "--size-factor", "4", "--steps", "3", "--warmup-steps", "1", "--expected-world-size", "2"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (res,) = _results(proc.stdout)
    assert res["metric"] == "busbw" and res["unit"] == "GB/s" and res["benchmark"] == "allreduce"
    assert res["world_size"] == 2 and res["backend"] == "gloo" and res["rank_source"] == "openmpi"
    assert [r["bytes"] for r in res["sizes"]] == [8, 32, 128, 512, 2048, 8192, 32768]
    for row in res["sizes"]:
        assert row["wrong"] == 0 and row["count"] == row["bytes"] // 4 and row["time_us"] > 0
        assert row["algbw_gbs"] == pytest.approx(row["bytes"] / (row["time_us"] * 1e-6) / 1e9, rel=1e-9)
        assert row["busbw_gbs"] == pytest.approx(row["algbw_gbs"] * 2 * (2 - 1) / 2, rel=1e-12)
    assert res["value"] == res["sizes"][-1]["busbw_gbs"] and res["largest_bytes"] == 32768
    assert res["avg_busbw"] == pytest.approx(sum(r["busbw_gbs"] for r in res["sizes"]) / 7)
    table = [ln.split() for ln in proc.stdout.splitlines() if ln.startswith(" ") and ln.split()[0].isdigit()]
    assert [int(t[0]) for t in table] == [8, 32, 128, 512, 2048, 8192, 32768]
    assert "# Avg bus bandwidth    : %.4f" % res["avg_busbw"] in proc.stdout


@pytest.mark.mpi
def test_two_rank_allreduce_wrong_values_exit_6():
    proc = _mpirun(["--benchmark", "allreduce", "--max-bytes", "64", "--steps", "1", "--warmup-steps", "0"],
                   extra_env=["DLRUN_HARNESS_TEST_PERTURB_RANK=1"])
    assert proc.returncode == common.EXIT_WRONG_RESULT, proc.stdout + proc.stderr
    assert _results(proc.stdout) == []
    assert _error_lines(proc.stderr) == [
        "dlrun-harness: error: all-reduce returned wrong values: 8 elements over all ranks, "
        "at message sizes [8, 16, 32, 64] bytes"]


@pytest.mark.mpi
def test_two_rank_alltoall_checks_every_block():
    """Rank 0's first element goes to rank 0 only; the check finds it at each size, and a clean run has
    nccl-tests' alltoall sizes (the buffer one rank sends) and per-peer counts."""
    bad = _mpirun(["--benchmark", "alltoall", "--max-bytes", "64", "--steps", "1", "--warmup-steps", "0"],
                  extra_env=["DLRUN_HARNESS_TEST_PERTURB_RANK=0"])
    assert bad.returncode == common.EXIT_WRONG_RESULT, bad.stdout + bad.stderr
    assert _error_lines(bad.stderr) == [
        "dlrun-harness: error: alltoall returned wrong values: 4 elements over all ranks, "
        "at message sizes [8, 16, 32, 64] bytes"]
    good = _mpirun(["--benchmark", "alltoall", "--max-bytes", "64", "--steps", "1", "--warmup-steps", "0"])
    assert good.returncode == 0, good.stdout + good.stderr
    (res,) = _results(good.stdout)
    assert res["collective"] == "alltoall" and res["api"] == "torch.distributed.all_to_all_single"
    assert [(r["bytes"], r["count"], r["wrong"]) for r in res["sizes"]] == [(8, 1, 0), (16, 2, 0), (32, 4, 0),
                                                                            (64, 8, 0)]
