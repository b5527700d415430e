"""LLM pretraining in the in-container PyTorch harness: the Llama-3-style decoder (published parameter counts,
FLOPs per token), its data (byte-level tokenizer, token shards), training for real on the CPU with 1 and 2
ranks under DDP and FSDP2 (gloo, launched by mpirun and torchrun as dlrun launches the harness), MFU against
a measured matmul ceiling and the refusal of an MFU above 1."""

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dlrun.measure import measure_matmul
from dlrun.paths import HARNESS_DIR
from harness_runs import free_port as _free_port, harness_env as _env, mpirun_harness as _mpirun, run_harness as _run
from dlrun.results.parsers import parse_text
from dlrun.harness import load_harness

HARNESS = HARNESS_DIR / "harness_pytorch.py"
REPO = Path(__file__).resolve().parents[1]
llama = load_harness("pytorch", "llama")
models = load_harness("pytorch", "models")
text = load_harness("pytorch", "text")
mfu = load_harness("pytorch", "mfu")
common = load_harness("pytorch", "common")

# Published parameter counts. Llama 3.2 1B: 1,235,814,400 (counted from meta-llama/Llama-3.2-1B-Instruct's
# safetensors in ModelCloud/GPTQModel, tests/test_parameter_count.py: `LLAMA_3_2_1B_PARAMETER_COUNT =
# 1235814400`; Meta's model card rounds it to "1B (1.23B)"). Llama 3.1 8B: 8,030,261,248 (Ollama's API
# documentation, ollama/ollama docs/api.md, "Show Model Information" for llama3 8B:
# `"general.parameter_count": 8030261248`; the same architecture as Llama 3.1 8B; Meta's card: "8B").
PUBLISHED = {"llama3_1b": 1235814400, "llama3_8b": 8030261248}


def _torchrun(args, np=2, timeout=300):
    torchrun = Path(sys.executable).parent / "torchrun"
    cmd = [str(torchrun), "--nproc-per-node", str(np), "--master-addr", "127.0.0.1",
           "--master-port", str(_free_port()), str(HARNESS), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_env())


def _results(stdout):
    return [json.loads(ln[len("DLRUN_RESULT "):]) for ln in stdout.splitlines()
            if ln.startswith("DLRUN_RESULT ")]


def _errors(stderr):
    return [ln for ln in stderr.splitlines() if ln.startswith("dlrun-harness: ")]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A small real text corpus: this repository's README, documentation and architecture notes, as plain text."""
    root = tmp_path_factory.mktemp("corpus")
    for name in ("README.md", "ARCHITECTURE.md", "docs/running.md", "docs/results.md"):
        (root / (name.replace("/", "-").split(".")[0].lower() + ".txt")).write_bytes((REPO / name).read_bytes())
    return root


@pytest.fixture(scope="module")
def ceiling():
    """This node's matrix-multiply rate (GFLOP/s, all threads), as `dlrun measure matmul` takes it."""
    return measure_matmul("fp32", size=1024, repeats=5)["value"]


TINY = ["--model", "llama3_tiny", "--seq-length", "64", "--batch-size", "4", "--threads", "1",
        "--display-every", "5"]


# ----------------------------------------------------------------------------------------------- the model
@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_counts_match_the_published_ones(name):
    counted = models.describe_model(name)["params"]
    assert abs(counted - PUBLISHED[name]) / PUBLISHED[name] <= 0.001
    assert counted == PUBLISHED[name]  # the architecture is exactly the published one


def test_flops_per_token_follow_the_palm_formula():
    for name in llama.LLAMA_NAMES:
        d = models.describe_model(name)
        cfg = llama.llama_config(name)
        embedding = cfg["vocab_size"] * cfg["dim"]
        n = d["params"] - (0 if cfg["tied"] else embedding)  # the input table is looked up, not multiplied
        assert d["matmul_params"] == n
        L, H, Q, T = cfg["n_layers"], cfg["n_heads"], cfg["head_dim"], cfg["seq_length"]
        assert d["flops_per_token"] == 6 * n + 12 * L * H * Q * T
        assert d["forward_macs"] * 6 == d["flops_per_token"] and d["forward_macs_per"] == "token"
    # The weight part counted independently: forward hooks on every linear layer of a (meta) model, per token;
    # the formula's N also holds the RMSNorm weights, which multiply but are no matrix product.
    model = llama.meta_llama("llama3_1b", seq_length=128)
    linear_macs = models._forward_macs(model, [torch.zeros(1, 128, dtype=torch.long)]) // 128
    norms = (2 * 16 + 1) * 2048
    assert linear_macs == llama.matmul_params(model) - norms == 1235746816


def test_the_tiny_model_is_a_causal_decoder():
    torch.manual_seed(0)
    model = llama.build_llama("llama3_tiny", seq_length=16).eval()
    assert 3e6 < models.count_params(model) < 4e6
    tokens = torch.randint(0, 512, (2, 16))
    changed = tokens.clone()
    changed[:, 10:] = (changed[:, 10:] + 1) % 512
    with torch.no_grad():
        a, b = model(tokens), model(changed)
    assert a.shape == (2, 16, 512)
    assert torch.allclose(a[:, :10], b[:, :10], atol=1e-6)  # no position sees a later token
    assert not torch.allclose(a[:, 10:], b[:, 10:])
    gqa = model.layers[0].attention
    assert (gqa.n_heads, gqa.n_kv, gqa.wk.out_features) == (8, 4, 4 * 32)


def test_activation_checkpointing_recomputes_the_same_gradients():
    grads = []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        model = llama.build_llama("llama3_tiny", seq_length=16, num_layers=2, checkpointing=checkpointing)
        tokens = torch.randint(0, 512, (2, 17), generator=torch.Generator().manual_seed(1))
        llama.lm_loss(model(tokens[:, :-1]), tokens[:, 1:]).backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    assert torch.allclose(grads[0], grads[1], atol=1e-6)


def test_an_old_pytorch_is_told_what_it_lacks():
    import types
    old = types.SimpleNamespace(__version__="1.0.0", nn=types.SimpleNamespace(functional=types.SimpleNamespace()))
    with pytest.raises(common.HarnessError, match=r"^the LLM models need scaled_dot_product_attention, silu, "
                                                  r"torch.outer, which PyTorch 1.0.0 lacks \(PyTorch >= 2.0"):
        llama.check_support(torch_mod=old)


# ------------------------------------------------------------------------------------------------ the data
def test_byte_level_tokenizer_and_corpus_kinds(tmp_path):
    assert text.encode("é!") == [text.BOS, 0xC3, 0xA9, 0x21]
    (tmp_path / "a.jsonl").write_text('{"text": "ab"}\n\n{"text": "c", "id": 3}\n')
    kind, files = text.find_corpus(str(tmp_path))
    assert (kind, [Path(f).name for f in files]) == ("jsonl", ["a.jsonl"])
    assert text.tokenize_corpus(kind, files).tolist() == [256, 97, 98, 256, 99]
    (tmp_path / "b.txt").write_text("x")
    with pytest.raises(common.HarnessError, match=r"holds 1 jsonl file\(s\) and 1 text file\(s\); expected one kind"):
        text.find_corpus(str(tmp_path))


@pytest.mark.parametrize("bad, message", [
    ('{"text": 3}\n', r"a\.jsonl:1: expected an object with a \"text\" string"),
    ('{"text": "ok"}\nnot json\n', r"a\.jsonl:2: not a JSON line"),
])
def test_bad_json_lines_name_the_file_and_line(tmp_path, bad, message):
    (tmp_path / "a.jsonl").write_text(bad)
    with pytest.raises(common.HarnessError, match=message):
        text.tokenize_corpus("jsonl", [str(tmp_path / "a.jsonl")])


def _write_tokens(path, ids, fmt):
    return struct.pack("<%d%s" % (len(ids), fmt), *ids)


@pytest.mark.parametrize("layout", ["nanogpt", "megatron", "llm.c-uint16", "llm.c-uint32"])
def test_token_shards_of_each_layout(tmp_path, layout):
    ids = [(7 * i) % 500 for i in range(300)]
    shard = tmp_path / "part.bin"
    if layout == "llm.c-uint32":
        header = struct.pack("<256i", 20240801, 7, len(ids), *([0] * 253))
        shard.write_bytes(header + _write_tokens(shard, ids, "I"))
    elif layout == "llm.c-uint16":
        header = struct.pack("<256i", 20240520, 1, len(ids), *([0] * 253))
        shard.write_bytes(header + _write_tokens(shard, ids, "H"))
    else:
        shard.write_bytes(_write_tokens(shard, ids, "H"))
    if layout == "megatron":  # header, version 1, dtype code 8 (uint16), sequence and document counts
        (tmp_path / "part.idx").write_bytes(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, 1, 1))
    windows = text.TokenWindows(str(tmp_path), 3, 16, 512, 0, 0, torch.device("cpu"))
    (inputs,), (targets,) = windows.next()
    assert inputs.shape == targets.shape == (3, 16)
    for row_in, row_out in zip(inputs.tolist(), targets.tolist()):
        start = ids.index(row_in[0])
        assert row_in == ids[start:start + 16] and row_out == ids[start + 1:start + 17]
    fields = windows.fields()
    assert fields["data_tokens"] == 300 and fields["data_source"] == "token-shards"
    assert fields["token_layout"] == layout.split("-")[0]
    windows.close()


def test_token_ids_beyond_the_vocabulary_and_broken_shards_are_refused(tmp_path):
    (tmp_path / "big.bin").write_bytes(struct.pack("<40H", *([600] * 40)))
    windows = text.TokenWindows(str(tmp_path), 1, 8, 512, 0, 0, torch.device("cpu"))
    with pytest.raises(common.HarnessError, match=r"^token id 600 in .*big\.bin is outside the model's vocabulary "
                                                  r"of 512$"):
        windows.next()
    (tmp_path / "big.bin").write_bytes(b"\x01\x02\x03")
    with pytest.raises(common.HarnessError, match=r"big\.bin: 3 bytes of tokens is not a whole number of uint16"):
        text.TokenWindows(str(tmp_path), 1, 8, 512, 0, 0, torch.device("cpu"))


# ------------------------------------------------------------------------------------------- real training
def _check_llm_result(res, world, batch, seq, steps, accum=1):
    assert (res["unit"], res["metric"], res["model"]) == ("tokens/sec", "throughput", "llama3_tiny")
    assert (res["world_size"], res["num_devices"], res["seq_length"], res["grad_accum"]) == (world, world, seq, accum)
    assert res["global_batch_size"] == world * batch * accum
    assert res["value"] == pytest.approx(world * batch * accum * seq * steps / res["wall_time_s"], rel=1e-9)
    assert res["tokens_per_sec_per_device"] == pytest.approx(res["value"] / world, rel=1e-12)
    assert res["flops_per_token"] == llama.flops_per_token(llama.llama_config("llama3_tiny", seq),
                                                           res["matmul_params"])
    assert res["achieved_tflops"] == pytest.approx(res["flops_per_token"] * res["value"] / 1e12, rel=1e-9)
    assert res["mfu_peak"] is None and "CPU" in res["peak_source"]


def test_tiny_llm_trains_on_a_real_corpus_and_records_mfu(corpus, ceiling):
    proc = _run(TINY + ["--steps", "15", "--warmup-steps", "2", "--data-dir", str(corpus),
                        "--matmul-gflops", "%.3f" % ceiling])
    assert proc.returncode == 0, proc.stderr
    (res,) = _results(proc.stdout)
    _check_llm_result(res, 1, 4, 64, 15)
    assert (res["data_source"], res["data_path"], res["token_layout"]) == ("text", str(corpus), "byte-level")
    assert res["loss_fell"] is True and res["final_loss"] < res["first_loss"] - 1.0, res
    assert res["matmul_gflops"] == pytest.approx(ceiling, rel=1e-3) and res["matmul_count"] == 1
    assert 0 < res["mfu_matmul"] <= 1
    assert res["mfu_matmul"] == pytest.approx(res["achieved_tflops"] * 1e3 / res["matmul_gflops"], rel=1e-9)
    assert res["loader_rate"] > 0 and res["loader_unit"] == "sequences/sec"
    assert res["loader_tokens_per_sec"] == pytest.approx(res["loader_rate"] * 64, rel=1e-12)
    assert 0 <= res["data_stall_s"] < res["wall_time_s"] and 0 <= res["data_stall_fraction"] < 1
    assert "total tokens/sec: %.2f" % res["value"] in proc.stdout
    parsed = parse_text(proc.stdout)  # what dlrun stores from it
    assert (parsed.unit, parsed.value, parsed.num_devices) == ("tokens/sec", res["value"], 1)
    assert parsed.value_is.startswith("total training throughput over all devices")


def test_an_mfu_above_one_is_refused(corpus):
    proc = _run(TINY + ["--steps", "2", "--warmup-steps", "0", "--matmul-gflops", "0.001"])
    assert proc.returncode == common.EXIT_IMPOSSIBLE, proc.stderr
    assert _results(proc.stdout) == []
    (line,) = _errors(proc.stderr)
    assert line.startswith("dlrun-harness: error: MFU ") and "against the measured matmul ceiling is above 1" in line


@pytest.mark.mpi
@pytest.mark.parametrize("dist", ["ddp", "fsdp"])
def test_two_ranks_train_under_ddp_and_fsdp(corpus, ceiling, dist):
    proc = _mpirun(TINY + ["--steps", "10", "--warmup-steps", "1", "--data-dir", str(corpus), "--dist", dist,
                           "--expected-world-size", "2", "--matmul-gflops", "%.3f" % ceiling])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "terminate called" not in proc.stderr
    (res,) = _results(proc.stdout)
    _check_llm_result(res, 2, 4, 64, 10)
    assert (res["dist"], res["backend"], res["rank_source"]) == (dist, "gloo", "openmpi")
    assert res["loss_fell"] is True
    assert res["matmul_count"] == 1  # two ranks on one node share its measured ceiling
    assert 0 < res["mfu_matmul"] <= 1
    if dist == "fsdp":
        assert res["fsdp_sharded"] is True and res["fsdp_api"].endswith("fully_shard")


@pytest.mark.mpi
def test_fsdp_under_torchrun_with_accumulation_and_bf16(corpus):
    proc = _torchrun(TINY + ["--steps", "4", "--warmup-steps", "1", "--data-dir", str(corpus), "--dist", "fsdp",
                             "--global-batch-size", "16", "--precision", "amp"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (res,) = _results(proc.stdout)
    _check_llm_result(res, 2, 4, 64, 4, accum=2)
    assert (res["rank_source"], res["amp_dtype"], res["fsdp_param_dtype"]) == ("torchrun", "bfloat16", "bfloat16")


@pytest.mark.mpi
@pytest.mark.parametrize("dist", ["ddp", "fsdp"])
def test_replica_check_fires_for_dense_and_sharded_parameters(dist):
    proc = _mpirun(TINY + ["--steps", "1", "--warmup-steps", "0", "--dist", dist],
                   extra_env=["DLRUN_HARNESS_TEST_PERTURB_RANK=1"])
    assert proc.returncode == common.EXIT_DIVERGED, proc.stdout + proc.stderr
    assert _results(proc.stdout) == []
    assert "dlrun-harness: error: replicas diverged" in proc.stderr
    if dist == "fsdp":
        assert "the gathered parameters" in proc.stderr


def test_sharded_verdict_checks_coverage_and_sums():
    fsdp = load_harness("pytorch", "fsdp")
    whole = [10.0, 20.0, 100.0, 1.0, 1.0]
    assert fsdp._sharded_verdict([10.0, 20.0, 100.0], whole, whole, 2) is None
    missing = fsdp._sharded_verdict([10.0, 20.0, 90.0], whole, whole, 2)
    assert missing[0] == "sharded parameters: the ranks' shards hold 90 elements, the gathered parameters 100"
    wrong_sum = fsdp._sharded_verdict([10.5, 20.0, 100.0], whole, whole, 2)
    assert wrong_sum[0].startswith("sharded parameters: the shards add up to")
    unsharded = fsdp._sharded_verdict([10.0, 20.0, 100.0], whole, [10.0, 20.0, 100.0, 1.0, 0.5], 2)
    assert unsharded[0].startswith("replicas diverged: the gathered parameters")


def test_the_run_summary_shows_the_mfu_the_run_stores(ceiling):
    """The summary table of an LLM run says its MFU against the measured matmul ceiling (the figure stored as
    the run's mfu_matmul row), and without a ceiling why there is none."""
    from dlrun.cli.progress import summary_rows
    from dlrun.execute.record import RunRecord, secondary_rows

    # ten times the measured rate: this test reads the summary, not the machine (a loaded node's ceiling may
    # come out below what one rank then achieves, which the harness refuses)
    for given in (["--matmul-gflops", "%.3f" % (10 * ceiling)], []):
        proc = _run(TINY + ["--steps", "2", "--warmup-steps", "1", *given])
        assert proc.returncode == 0, proc.stderr
        parsed = parse_text(proc.stdout)
        result = parsed.to_dict()
        rows = dict(summary_rows(RunRecord(id="r1", path=Path("/tmp/r1"), status="ok", exit_code=0, result=result)))
        stored = {row["metric"]: row["value"] for row in secondary_rows(result)}
        if given:
            assert rows["MFU (matmul)"].startswith(f"{100 * stored['mfu_matmul']:.1f} % of this system's measured")
        else:
            assert "mfu_matmul" not in stored and rows["MFU"].startswith("not computed: a CPU's peak")


def test_the_last_step_row_covers_every_timed_step():
    """With fewer steps than --display-every, the rows printed are not just step 1's: the last row is the
    last step's, the rate over every timed step (as the total line's), not one that disagrees with it."""
    proc = _run(TINY + ["--steps", "3", "--warmup-steps", "1"])  # TINY displays every 5 steps
    assert proc.returncode == 0, proc.stderr
    rows = [line.split("\t")[0] for line in proc.stdout.splitlines() if "\ttokens/sec: " in line]
    assert rows == ["1", "3"], proc.stdout
