"""The bare CUDA loops the GPU benchmark (bench/gpu.py) measures dlrun against, one JSON line each.

  train   the harness's own model (build_model), SGD with momentum, fp16 autocast with a gradient scaler,
          channels-last, one synthetic batch on the GPU; synchronised only after warm-up and at the end
  matmul  an n x n product per dtype (fp32 with TF32 off and on, fp16, bf16): TFLOP/s, median of repeats
  nccl    a one-rank NCCL process group: each collective on exact values (checked), algorithm bandwidth
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "launcher"))


def train(args) -> dict:
    from dlrun.harness import load_harness

    models = load_harness("pytorch", "models")
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda", 0)
    torch.manual_seed(1234)
    model = models.build_model(args.model).to(dev).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    crit = nn.CrossEntropyLoss().to(dev)
    scaler = torch.amp.GradScaler("cuda")
    x = torch.randn(args.batch_size, 3, 224, 224, device=dev).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (args.batch_size,), device=dev)

    def step():
        opt.zero_grad()
        with torch.autocast(device_type="cuda", dtype=torch.float16):
            loss = crit(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    for _ in range(args.warmup_steps):
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    torch.cuda.synchronize()
    return {"model": args.model, "images_per_sec": args.batch_size * args.steps / (time.perf_counter() - start)}


def matmul(args) -> dict:
    n, rates = args.size, {}
    for name, dtype, tf32 in (("fp32", torch.float32, False), ("tf32", torch.float32, True),
                              ("fp16", torch.float16, False), ("bf16", torch.bfloat16, False)):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        a = torch.randn(n, n, device="cuda", dtype=dtype)
        b = torch.randn(n, n, device="cuda", dtype=dtype)
        times = []
        for _ in range(args.repeats + 1):
            torch.cuda.synchronize()
            start = time.perf_counter()
            a @ b
            torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        rates[name] = 2 * n ** 3 / statistics.median(times[1:]) / 1e12
    torch.backends.cuda.matmul.allow_tf32 = False
    return {"size": n, "tflops": rates}


def nccl(args) -> dict:
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=0, world_size=1)
    count = args.bytes // 4
    values = torch.arange(count, device="cuda", dtype=torch.float32)
    out = {}
    ops = {"all_reduce": lambda t: dist.all_reduce(t),
           "broadcast": lambda t: dist.broadcast(t, 0),
           "all_gather": lambda t: dist.all_gather_into_tensor(torch.empty_like(t), t),
           "reduce_scatter": lambda t: dist.reduce_scatter_tensor(torch.empty_like(t), t),
           "all_to_all": lambda t: dist.all_to_all_single(torch.empty_like(t), t)}
    for name, op in ops.items():
        tensor = values.clone()
        op(tensor)
        torch.cuda.synchronize()
        exact = bool(torch.equal(tensor, values))  # one rank: every collective leaves its input as it was
        start = time.perf_counter()
        for _ in range(args.repeats):
            op(tensor)
        torch.cuda.synchronize()
        seconds = (time.perf_counter() - start) / args.repeats
        out[name] = {"exact": exact, "algbw_gbs": args.bytes / seconds / 1e9, "busbw_gbs": 0.0,
                     "note": "busbw = algbw x 2(n-1)/n (or (n-1)/n) is 0 with one rank"}
    dist.destroy_process_group()
    return {"bytes": args.bytes, "nccl": ".".join(map(str, torch.cuda.nccl.version())), "collectives": out}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=("train", "matmul", "nccl"))
    p.add_argument("--model", default="resnet50_v1.5")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--warmup-steps", type=int, default=15)
    p.add_argument("--size", type=int, default=8192)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--bytes", type=int, default=64 << 20)
    args = p.parse_args()
    print(json.dumps({"train": train, "matmul": matmul, "nccl": nccl}[args.what](args)))


if __name__ == "__main__":
    main()
