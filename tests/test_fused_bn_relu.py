"""The fused batch norm + ReLU kernel (harness_pytorch_bnrelu.py): built with this machine's real C compiler and
loaded into this process; what it computes is checked against PyTorch's own batch norm, addition and ReLU, and
what a harness run records is checked on real runs, with and without a compiler."""
from __future__ import annotations

import copy
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from dlrun.harness import load_harness
from harness_runs import HARNESS, harness_env

import subprocess

bnrelu = load_harness("pytorch", "bnrelu")
kernel_mod = load_harness("pytorch", "kernel")
models = load_harness("pytorch", "models")


@pytest.fixture(scope="module", autouse=True)
def kernel(tmp_path_factory):
    os.environ[kernel_mod.CACHE_ENV] = str(tmp_path_factory.mktemp("kernels"))
    lib, why_not = kernel_mod.fused_kernel()
    assert lib is not None, why_not
    yield lib
    os.environ.pop(kernel_mod.CACHE_ENV, None)


def _cl(*shape, scale=1.0, shift=0.0):
    return (torch.randn(*shape) * scale + shift).contiguous(memory_format=torch.channels_last)


def _bn(C, dtype, momentum=0.1):
    torch.manual_seed(3)
    bn = torch.nn.BatchNorm2d(C, momentum=momentum)
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
    return bn.to(dtype).train()


def _step(bn, x, res, grad, fused):
    """Output and gradients (input, weight, bias, residual) of relu(bn(x) [+ res]) in bn's precision."""
    cast = [t.to(bn.weight.dtype).contiguous(memory_format=torch.channels_last) if t is not None else None
            for t in (x, res, grad)]
    x, res, grad = cast
    x.requires_grad_()
    if res is not None:
        res.requires_grad_()
    if fused:
        y = bnrelu.bn_relu(bn, x, res)
    else:
        out = bn(x)
        y = torch.relu(out + res if res is not None else out)
    inputs = [x, bn.weight, bn.bias] + ([res] if res is not None else [])
    return [y.double()] + [g.double() for g in torch.autograd.grad(y, inputs, grad)]


def _error(got, ref):
    return float((got.detach() - ref.detach()).norm() / ref.detach().norm())


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("shape,momentum", [((4, 32, 7, 9), 0.1), ((3, 130, 5, 5), None), ((2, 8, 1, 3), 0.3),
                                            ((2, 512, 2, 2), 0.1), ((8, 64, 28, 28), 0.1)])
def test_fused_kernel_computes_what_pytorch_computes(shape, momentum, residual, threads):
    """Output, every gradient and the running statistics against PyTorch's own ops in float64: the kernel is
    at least about as close as PyTorch's fp32 ops are (closer on large tensors: its sums are in double).
    Channel counts that are and are not a multiple of the vector width, a mean far from 0, a few rows per
    channel, cumulative (momentum None) and exponential averages, 1 and 2 threads; two steps, so that the
    second running average builds on the first."""
    torch.set_num_threads(threads)
    C = shape[1]
    x, grad = torch.randn(*shape, dtype=torch.float64) * 2 + 4, torch.randn(*shape, dtype=torch.float64)
    res = torch.randn(*shape, dtype=torch.float64) if residual else None
    ref, native, fused = _bn(C, torch.float64, momentum), _bn(C, torch.float32, momentum), _bn(C, torch.float32,
                                                                                                momentum)
    for _ in range(2):
        want = _step(ref, x, res, grad, False)
        plain = _step(native, x, res, grad, False)
        got = _step(fused, x, res, grad, True)
    for name, g, p, w in zip(("y", "input", "weight", "bias", "residual"), got, plain, want):
        assert _error(g, w) <= 2 * _error(p, w) + 1e-6, name
    assert got[0].shape == x.shape
    for name in ("running_mean", "running_var"):
        w = getattr(ref, name)
        assert _error(getattr(fused, name).double(), w) <= 2 * _error(getattr(native, name).double(), w) + 1e-6
    assert int(fused.num_batches_tracked) == int(ref.num_batches_tracked) == 2
    torch.set_num_threads(1)


def test_the_gradient_to_the_input_keeps_its_channels_last_layout():
    bn = _bn(16, torch.float32)
    x = _cl(2, 16, 3, 3).requires_grad_()
    bnrelu.bn_relu(bn, x).backward(_cl(2, 16, 3, 3))
    assert x.grad.is_contiguous(memory_format=torch.channels_last)


def test_nan_passes_the_relu_as_in_pytorch():
    """A channel with a NaN comes out NaN (torch.relu keeps NaN), so the harness's divergence check still sees
    it; the other channels are untouched."""
    ref, fused = _bn(16, torch.float32), _bn(16, torch.float32)
    x = _cl(2, 16, 3, 3)
    x[0, 5, 1, 1] = float("nan")
    want = torch.relu(ref(x))
    got = bnrelu.bn_relu(fused, x)
    assert torch.isnan(got[:, 5]).all() and torch.isnan(want[:, 5]).all()
    others = [c for c in range(16) if c != 5]
    assert torch.allclose(got[:, others], want[:, others], atol=1e-5)


def test_what_the_kernel_does_not_take_goes_to_pytorch():
    """Evaluation mode, NCHW, bf16 and a single value per channel run PyTorch's own ops, errors included: the
    kernel declines (None) and the model's seam runs them."""
    ref, fused = _bn(8, torch.float32), _bn(8, torch.float32)
    block = torch.nn.Module()
    block.relu, block.fused_bn_relu = torch.nn.ReLU(inplace=True), bnrelu.bn_relu
    x = _cl(2, 8, 4, 4)
    ref.eval(), fused.eval()
    assert bnrelu.bn_relu(fused, x) is None
    assert torch.equal(models._bn_relu(block, fused, x), torch.relu(ref(x)))
    ref.train(), fused.train()
    nchw = torch.randn(2, 8, 4, 4)
    assert torch.allclose(models._bn_relu(block, fused, nchw), torch.relu(ref(nchw)), atol=1e-6)
    assert not bnrelu._fits(fused, x.bfloat16(), None)
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        models._bn_relu(block, fused, _cl(1, 8, 1, 1))


@pytest.mark.parametrize("block", ["basic", "bottleneck"])
def test_a_fused_resnet_trains_as_pytorch_does(block):
    """A ResNet of basic blocks (ResNet-18) and one of bottleneck blocks: one training step's loss and
    gradients, against the same model in float64, as close with the kernel as with PyTorch's ops."""
    torch.manual_seed(0)
    model = (models.build_model("resnet18") if block == "basic" else
             models.ResNet(models._Bottleneck, [1, 1, 1, 1]))
    x, y = torch.randn(2, 3, 64, 64), torch.tensor([3, 7])

    def step(m, fused):
        bnrelu.switch(m, fused)
        m.zero_grad()
        dtype = next(m.parameters()).dtype
        loss = F.cross_entropy(m(x.to(dtype).contiguous(memory_format=torch.channels_last)), y)
        loss.backward()
        return float(loss.detach()), torch.cat([p.grad.flatten().double() for p in m.parameters()])

    want = step(copy.deepcopy(model).double(), False)
    plain = step(copy.deepcopy(model).to(memory_format=torch.channels_last), False)
    got = step(copy.deepcopy(model).to(memory_format=torch.channels_last), True)
    assert got[0] == pytest.approx(want[0], rel=1e-6)
    assert _error(got[1], want[1]) <= 2 * _error(plain[1], want[1]) + 1e-6


def test_the_kernel_is_built_once_per_cpu_and_compiler(tmp_path, monkeypatch):
    first = kernel_mod.build(str(tmp_path))
    stamp = os.stat(first).st_mtime_ns
    assert kernel_mod.build(str(tmp_path)) == first and os.stat(first).st_mtime_ns == stamp
    monkeypatch.setattr(kernel_mod, "cpu_identity", lambda: "another CPU")
    second = kernel_mod.build(str(tmp_path))
    assert second != first and sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [Path(first).name, Path(second).name])  # no work folders left


def test_compiler_flags_keep_avx512_out_on_x86():
    flags = kernel_mod.compiler_flags("x86_64")
    assert "-march=native" in flags and "-mno-avx512f" in flags and "-ffp-contract=off" in flags
    assert "-mcpu=native" in kernel_mod.compiler_flags("ppc64le")


def _no_compiler_path(tmp_path):
    """A PATH with this Python and nothing else: no cc, no gcc."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    return str(bin_dir)


def _kind(tmp_path, family=26, model=2):
    """A cpuinfo of another processor kind for the harness to read (DLRUN_HARNESS_TEST_CPUINFO): by default a
    Zen 5's, where the kernel was measured to win, so that auto means on (harness_contract.MEASURED_WINS)."""
    path = tmp_path / f"cpuinfo-{family}-{model}"
    path.write_text(f"vendor_id\t: AuthenticAMD\ncpu family\t: {family}\nmodel\t\t: {model}\n")
    return str(path)


def _harness(tmp_path, *extra, path=None, env=None):
    env = harness_env(**{kernel_mod.CACHE_ENV: str(tmp_path / "cache"), "DLRUN_HARNESS_TEST_CPUINFO":
                         _kind(tmp_path), **(env or {})})
    env.pop("CC", None)
    if path is not None:
        env["PATH"] = path
    return subprocess.run([sys.executable, str(HARNESS), "--model", "resnet18", "--batch-size", "2", "--steps", "2",
                           "--warmup-steps", "1", "--device", "cpu", "--expected-world-size", "1", *extra],
                          capture_output=True, text=True, timeout=300, env=env)


def _result(proc):
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("DLRUN_RESULT ")]
    assert len(lines) == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads(lines[0][len("DLRUN_RESULT "):])


def test_a_run_records_the_fused_kernel_and_why_it_is_off(tmp_path):
    on = _result(_harness(tmp_path))
    assert on["knobs"]["fused_bn_relu"] == {"value": "on", "source": "default"}
    assert on["fused_bn_relu_off_because"] is None
    off = _result(_harness(tmp_path, "--fused-bn-relu", "off"))
    assert off["knobs"]["fused_bn_relu"] == {"value": "off", "source": "asked for"}
    nchw = _result(_harness(tmp_path, "--channels-last", "off"))
    assert nchw["knobs"]["fused_bn_relu"]["value"] == "off"
    assert "NCHW" in nchw["fused_bn_relu_off_because"]
    # a Zen 4, where it was not measured to win (1.006, 1.000): auto is PyTorch's ops, and says why
    zen4 = _result(_harness(tmp_path, env={"DLRUN_HARNESS_TEST_CPUINFO": _kind(tmp_path, 25, 17)}))
    assert zen4["knobs"]["fused_bn_relu"] == {"value": "off", "source": "default"}
    assert "not measured to win on this processor kind (AuthenticAMD 25 17)" in zen4["fused_bn_relu_off_because"]
    # a tuned "on" (dlrun renders it as a flag) beside a layout the kernel cannot take: PyTorch's ops, no error
    tuned = _result(_harness(tmp_path, "--fused-bn-relu", "on", "--channels-last", "off",
                             env={"DLRUN_KNOB_SOURCES": "fused_bn_relu=tuned,channels_last=tuned"}))
    assert tuned["knobs"]["fused_bn_relu"] == {"value": "off", "source": "tuned"}
    assert "NCHW" in tuned["fused_bn_relu_off_because"]
    asked = _harness(tmp_path, "--fused-bn-relu", "on", "--channels-last", "off")
    assert asked.returncode == 2 and "--fused-bn-relu on: the model runs NCHW" in asked.stderr
    lenet = _result(subprocess.run([sys.executable, str(HARNESS), "--model", "lenet", "--batch-size", "2",
                                    "--steps", "1", "--warmup-steps", "1", "--device", "cpu"],
                                   capture_output=True, text=True, timeout=300, env=harness_env()))
    assert lenet["knobs"]["fused_bn_relu"]["value"] == "n/a"


def test_without_a_compiler_auto_runs_pytorchs_ops_and_on_is_refused(tmp_path):
    path = _no_compiler_path(tmp_path)
    assert shutil.which("cc", path=path) is None and shutil.which("gcc", path=path) is None
    auto = _result(_harness(tmp_path, path=path))
    assert auto["knobs"]["fused_bn_relu"] == {"value": "off", "source": "default"}
    assert "no C compiler" in auto["fused_bn_relu_off_because"]
    on = _harness(tmp_path, "--fused-bn-relu", "on", path=path)
    assert on.returncode == 2, on.stderr[-2000:]
    assert "--fused-bn-relu on: the fused kernel: no C compiler" in on.stderr
    assert not any(ln.startswith("DLRUN_RESULT ") for ln in on.stdout.splitlines())


def test_a_tuning_trial_times_the_kernel_against_pytorchs_ops(tmp_path):
    """dlrun tune's trial switches the same model between the kernel and PyTorch's ops, step by step."""
    env = harness_env(**{kernel_mod.CACHE_ENV: str(tmp_path / "cache"), "DLRUN_TUNE_TRIAL": json.dumps(
        {"extras": [{"fused_bn_relu": "off"}], "rounds": 2, "warmup": 1}),
        "DLRUN_HARNESS_TEST_CPUINFO": _kind(tmp_path)})
    proc = subprocess.run([sys.executable, str(HARNESS), "--model", "resnet18", "--batch-size", "2", "--threads",
                           "1", "--device", "cpu"], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    record = json.loads(proc.stdout.split("DLRUN_TUNE ", 1)[1].splitlines()[0])
    assert record["defaults"]["fused_bn_relu"] == "on"
    assert [v["knobs"]["fused_bn_relu"] for v in record["variants"]] == ["on", "off"]
    assert [v["fused_bn_relu"] for v in record["variants"]] == [True, False]
    assert all(len(v["step_s"]) == 2 for v in record["variants"])


def test_the_tuner_measures_the_kernel_only_for_cnn_training_on_a_cpu(monkeypatch):
    from dlrun.cli.options import load_catalog
    from dlrun.plan import resolve_plan
    from dlrun.tune import search

    monkeypatch.setenv("DLRUN_TUNE", "auto")
    plan = resolve_plan(load_catalog(), "resnet50", batch_size=2, steps=2, warmup_steps=1, telemetry="off")
    assert plan.knob_sources["fused_bn_relu"] == "default"
    assert search.measurable(plan, ["fused_bn_relu"]) == ["fused_bn_relu"]
    extras = search._spec(["fused_bn_relu"], plan, 3, 20.0, singles=True)["extras"]
    assert {"fused_bn_relu": "off"} in extras and {"fused_bn_relu": "on"} in extras  # the default is either
    gpu = plan.model_copy(update={"device": "cuda"})
    tokens = plan.model_copy(update={"workload": plan.workload.model_copy(update={"kind": "bert-finetuning"})})
    assert search.measurable(gpu, ["fused_bn_relu"]) == search.measurable(tokens, ["fused_bn_relu"]) == []
    assert search._why_not(gpu, "fused_bn_relu") == "n/a: a CPU kernel"
    asked = resolve_plan(load_catalog(), "resnet50", batch_size=2, steps=2, warmup_steps=1, telemetry="off",
                         fused_bn_relu="off")
    assert asked.fused_bn_relu == "off" and search.measurable(asked, ["fused_bn_relu"]) == []


@pytest.mark.parametrize("given,why", [({"channels_last": "off"}, "takes channels-last, not --channels-last off"),
                                       ({"precision": "amp"}, "computes in fp32, not --precision amp"),
                                       ({"compile": "on"}, "(--compile on)")])
def test_the_launcher_refuses_an_asked_for_kernel_that_cannot_run(given, why):
    from dlrun.cli.options import load_catalog
    from dlrun.errors import UsageError
    from dlrun.plan import resolve_plan

    with pytest.raises(UsageError) as err:
        resolve_plan(load_catalog(), "resnet50", batch_size=2, steps=2, warmup_steps=1, telemetry="off",
                     fused_bn_relu="on", **given)
    assert why in str(err.value) and "valid here: auto, off" in str(err.value)
    assert resolve_plan(load_catalog(), "resnet50", batch_size=2, steps=2, warmup_steps=1, telemetry="off",
                        fused_bn_relu="auto", **given).fused_bn_relu == "auto"


def test_a_layout_that_leaves_the_kernel_out_is_still_judged_by_the_tuner():
    """A channels-last=off variant keeps the reference's fused_bn_relu "on" but runs PyTorch's ops (the kernel
    takes channels-last), as a run with that decision would: its speed counts, and it wins where faster; the
    fused step, a default here, is kept only where its interval shows a win (none was measured)."""
    from dlrun.tune.search import choose, speedups

    base = {"fused_optimizer": "on", "fused_bn_relu": "on", "channels_last": "on", "threads": 2}
    record = {"variants": [
        {"knobs": base, "step_s": [1.0, 1.0, 1.0], "fused": True, "fused_bn_relu": True},
        {"knobs": {**base, "channels_last": "off"}, "step_s": [0.8, 0.8, 0.8], "fused": True,
         "fused_bn_relu": False},
        {"knobs": {**base, "fused_bn_relu": "off"}, "step_s": [1.03, 1.02, 1.04], "fused": True,
         "fused_bn_relu": False}]}
    assert speedups(record) == [1.0, 1.25, pytest.approx(1 / 1.03)]
    chosen, gain = choose(record, ["fused_optimizer", "fused_bn_relu", "channels_last"])
    assert chosen == {"fused_optimizer": "off", "fused_bn_relu": "on", "channels_last": "off"}
    assert gain["fused_bn_relu"] == pytest.approx(1.03, abs=0.005)  # (the grid lacks its reference point here)


def test_the_kernel_repeats_bit_for_bit():
    """Per-thread sums are combined in thread order, not in the order the threads finish: five runs of the same
    step with three threads (more than this machine has cores, so they finish in changing orders) agree in every
    bit."""
    torch.set_num_threads(3)
    x, grad, res = _cl(8, 96, 14, 14, scale=3.0, shift=2.0), _cl(8, 96, 14, 14), _cl(8, 96, 14, 14)
    runs = []
    for _ in range(5):
        bn = _bn(96, torch.float32)
        runs.append(_step(bn, x, res, grad, True) + [bn.running_mean.clone(), bn.running_var.clone()])
    torch.set_num_threads(1)
    for run in runs[1:]:
        assert all(torch.equal(a, b) for a, b in zip(run, runs[0]))


def test_a_kernel_that_would_bring_a_second_openmp_runtime_is_not_used(monkeypatch, tmp_path):
    """Where PyTorch's libgomp has another soname (wheels that rename it), the kernel's libgomp.so.1 would load
    a second runtime with its own threads: the kernel is then left out, and the run says why. (This machine's
    PyTorch shares one libgomp with the kernel - the first check - so the second is staged by what the maps
    list.)"""
    maps = [m for m in open("/proc/self/maps") if "/libgomp" in m]
    assert len({m.split()[-1] for m in maps}) == 1  # one runtime here, the kernel loaded
    seen = iter([{"/torch.libs/libgomp-a34b3233.so.1"},
                 {"/torch.libs/libgomp-a34b3233.so.1", "/usr/lib/libgomp.so.1"}])
    monkeypatch.setattr(kernel_mod, "_libgomp_paths", lambda: next(seen))
    monkeypatch.setitem(kernel_mod.KERNEL, "tried", False)
    monkeypatch.setitem(kernel_mod.KERNEL, "lib", None)
    monkeypatch.setitem(kernel_mod.KERNEL, "why_not", None)
    monkeypatch.setenv(kernel_mod.CACHE_ENV, str(tmp_path))
    lib, why_not = kernel_mod.fused_kernel()
    assert lib is None and why_not == "the fused kernel would run on a second OpenMP runtime (/usr/lib/libgomp.so.1)"
