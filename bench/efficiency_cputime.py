"""Efficiency measured in CPU seconds, for a machine too loaded for wall-clock ratios (not part of `make bench`).

In one process with one thread (no OpenMP barrier to stall when a thread is descheduled), alternate: a training
step with the fused optimizer step, one with PyTorch's default step (each its own optimizer over the same model),
and two 2048^3 fp32 products with MKL and two with oneDNN (the faster counts, as in benchmark 2). Rates are FLOP
per CPU second (`time.process_time`), so another process taking the
core slows all three alike. Training FLOP = 3 x 2 x the harness's forward multiply-adds, as in benchmark 2.
Run it under the allocator the harness uses, e.g.
`OMP_NUM_THREADS=1 LD_PRELOAD=libtcmalloc_minimal.so.4 python bench/efficiency_cputime.py bert 3`.
"""
from __future__ import annotations

import json
import sys
import time

import torch

from common import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "launcher" / "dlrun" / "harness"))
import harness_pytorch_data as data  # noqa: E402
import harness_pytorch_features as features  # noqa: E402
import harness_pytorch_models as models  # noqa: E402


def _setup(which: str):
    if which == "bert":
        model, n = models.build_model("bert_squad"), 2
        (ids, types, mask), (start, end) = data.synthetic_tokens(n, 384, 1, 30522, "squad", 1)
        params = [p for p in model.parameters() if p.requires_grad]
        opts = {m: features.make_adamw(params, 5e-5, 0.01, m)[0] for m in ("on", "off")}
        ce = torch.nn.CrossEntropyLoss()

        def loss():
            a, b = model(ids, types, mask)
            return (ce(a, start) + ce(b, end)) / 2
        return model, opts, loss, n * 6 * models.describe_model("bert_squad")["forward_macs"]
    model, n = models.build_model("resnet50_v1.5").to(memory_format=torch.channels_last), 16
    x, y = data.synthetic_images(n, (3, 224, 224), 1000, 1)
    x = x.contiguous(memory_format=torch.channels_last)
    opts = {m: features.make_optimizer(torch.optim.SGD, model.parameters(), m, lr=0.01, momentum=0.9)[0]
            for m in ("on", "off")}
    ce = torch.nn.CrossEntropyLoss()
    return model, opts, lambda: ce(model(x), y), n * 6 * models.describe_model("resnet50_v1.5")["forward_macs"]


def main() -> None:
    which, rounds = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model, opts, loss, flop = _setup(which)
    model.train()
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    try:  # oneDNN's product too, as bench/matmul.py: on AMD CPUs MKL's sgemm takes a slower path
        am, bm = a.to_mkldnn(), b.to_mkldnn()
        products = [lambda: torch.mm(a, b), lambda: torch._C._nn.mkldnn_linear(am, bm, None)]
    except Exception:  # noqa: BLE001 - torch without oneDNN tensors
        products = [lambda: torch.mm(a, b)]

    def step(opt) -> float:
        start = time.process_time()
        opt.zero_grad()
        loss().backward()
        opt.step()
        return flop / (time.process_time() - start) / 1e9

    def matmul() -> float:
        """The faster of MKL's and oneDNN's rate (the ceiling benchmark 2 quotes), GFLOP per CPU second."""
        rates = []
        for product in products:
            start = time.process_time()
            product()
            product()
            rates.append(2 * 2 * 2048 ** 3 / (time.process_time() - start) / 1e9)
        return max(rates)

    step(opts["on"]), step(opts["off"]), matmul()  # warm-up: optimizer state, kernels, allocator
    out: dict[str, list[float]] = {"matmul": [], "fused": [], "default": []}
    for r in range(rounds):
        for name in (("on", "off") if r % 2 == 0 else ("off", "on")):
            out["fused" if name == "on" else "default"].append(step(opts[name]))
        out["matmul"].append(matmul())
        print(which, r, {k: round(v[-1], 2) for k, v in out.items()}, file=sys.stderr, flush=True)
    for name in ("fused", "default"):
        out["efficiency_" + name] = [f / m for f, m in zip(out[name], out["matmul"])]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
