"""The harness's performance options: the fused optimizer step (same arithmetic as PyTorch's default step, picked
where this PyTorch has it, a clear error or a fallback where it does not) and training that still trains."""
from __future__ import annotations

import json

import pytest
import torch

from dlrun.harness import load_harness

common = load_harness("pytorch", "common")
features = load_harness("pytorch", "features")
entry = load_harness("pytorch")


def _params(seed=0):
    gen = torch.Generator().manual_seed(seed)
    params = [torch.randn(300, generator=gen, requires_grad=True), torch.randn(7, 5, generator=gen,
                                                                                requires_grad=True)]
    return params, gen


@pytest.mark.parametrize("cls, kwargs", [(torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}),
                                         (torch.optim.AdamW, {"lr": 0.01, "weight_decay": 0.01})])
def test_fused_step_computes_what_the_default_step_does(cls, kwargs):
    runs = {}
    for mode in ("available", "off"):
        params, gen = _params()
        opt, fused = features.make_optimizer(cls, params, mode, **kwargs)
        for _ in range(5):
            for p in params:
                p.grad = torch.randn(p.shape, generator=gen)
            opt.step()
        runs[mode] = (fused, [p.detach().clone() for p in params])
    assert runs["available"][0] is True and runs["off"][0] is False  # this PyTorch fuses both on CPU
    # auto on a CPU: PyTorch's own step, the fused one having been measured to win on no processor kind
    assert features.make_optimizer(cls, _params()[0], "auto", **kwargs)[1] is False
    for a, b in zip(runs["available"][1], runs["off"][1]):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), (a - b).abs().max()
    assert not torch.equal(runs["off"][1][0], _params()[0][0])  # the steps moved the parameters


class _NoFusedKeyword(torch.optim.SGD):
    """An optimizer as PyTorch < 2.0 had it: no `fused` keyword."""

    def __init__(self, params, lr, momentum=0.0):
        super().__init__(params, lr=lr, momentum=momentum)


class _CudaOnlyFused(torch.optim.SGD):
    """An optimizer as PyTorch 2.0-2.3 had it: `fused` refused for CPU tensors."""

    def __init__(self, params, lr, fused=None):
        if fused:
            raise RuntimeError("`fused=True` requires all the params to be floating point Tensors of supported "
                               "devices: ['cuda']")
        super().__init__(params, lr=lr)


@pytest.mark.parametrize("cls", [_NoFusedKeyword, _CudaOnlyFused])
def test_old_optimizers_fall_back_or_refuse(cls):
    params, _ = _params()
    opt, fused = features.make_optimizer(cls, params, "available", lr=0.1)
    assert isinstance(opt, cls) and fused is False
    with pytest.raises(common.HarnessError, match=r"^--fused-optimizer on: this PyTorch has no fused "
                                                  + cls.__name__) as exc:
        features.make_optimizer(cls, params, "on", lr=0.1)
    assert exc.value.code == common.EXIT_USAGE


def test_adam_without_adamw_is_fused_too():
    old = type("OldTorch", (), {"optim": type("optim", (), {"Adam": torch.optim.Adam})})
    params, _ = _params()
    opt, name, fused = features.make_adamw(params, 1e-3, 0.01, "available", old)
    assert (type(opt), name, fused) == (torch.optim.Adam, "adam", True)


def _losses(out):
    return [float(ln.split("\t")[-1]) for ln in out.splitlines() if "/sec: " in ln and "\t" in ln]


BERT_SMALL = ["--num-layers", "1", "--seq-length", "16", "--lr", "1e-3"]


@pytest.mark.parametrize("model, extra, fused", [("trivial", [], False), ("bert_squad", BERT_SMALL, False),
                                                 ("trivial", ["--fused-optimizer", "on"], True),
                                                 ("bert_squad", [*BERT_SMALL, "--fused-optimizer", "on"], True)])
def test_default_options_still_train(capsys, model, extra, fused):
    """With the harness's defaults (on a CPU PyTorch's own optimizer step: the fused one was measured to win on no
    processor kind), and with the fused step asked for, the loss on the fixed batch falls."""
    code = entry.main(["--model", model, "--batch-size", "4", "--steps", "8", "--warmup-steps", "0",
                       "--display-every", "1", "--threads", "1", *extra])
    out, err = capsys.readouterr()
    assert code == 0, err
    losses = _losses(out)
    assert len(losses) == 8 and losses[-1] < losses[0] and sum(losses[-3:]) < sum(losses[:3]) - 0.05, losses
    (line,) = [ln for ln in out.splitlines() if ln.startswith("DLRUN_RESULT ")]
    assert json.loads(line[len("DLRUN_RESULT "):])["fused_optimizer"] is fused


def test_the_step_clock_times_cpu_steps_as_they_return_and_the_timed_window_is_recorded(capsys, monkeypatch):
    """On the CPU every step is timed as it returns (one time per step, a printed row's own time left out, as
    before CUDA steps were timed with events); the result says where its timed window starts."""
    comm = load_harness("pytorch", "comm")
    ticks = iter([10.0, 10.5, 11.0, 20.0, 21.5])  # restart, two steps, restart after a row, one step
    monkeypatch.setattr(comm.time, "perf_counter", lambda: next(ticks))
    clock = comm.StepClock(torch.device("cpu"))
    clock.step_done()
    clock.step_done()
    assert clock.settle() == [0.5, 0.5] and clock.pending == []
    clock.restart()
    clock.step_done()
    assert clock.settle() == [0.5, 0.5, 1.5]
    monkeypatch.undo()
    before = __import__("time").time()
    code = entry.main(["--model", "trivial", "--steps", "3", "--warmup-steps", "1", "--batch-size", "2",
                       "--display-every", "2"])
    out = capsys.readouterr().out
    assert code == 0
    result = json.loads(out.split("DLRUN_RESULT ", 1)[1].splitlines()[0])
    assert before <= result["timed_start_unix"] <= before + 600 and result["wall_time_s"] > 0
    rows = [line for line in out.splitlines() if line[:1].isdigit() and "images/sec" in line]
    assert [row.split("\t")[0] for row in rows] == ["1", "2", "3"]  # the last step's row too
