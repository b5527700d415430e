"""A hand-written PyTorch training loop: the yardstick dlrun's harness is measured against.

Same model definition (the harness's own `build_model`), same optimizer (SGD, momentum 0.9), same loss,
same fixed synthetic batch kept in memory, same threads, precision, memory format, and (for the tuned path) the
same fused SGD step and fused batch norm + ReLU kernel where the harness ran them; nothing else:
no logging, no per-step timing, no rank detection, no result checks. Prints one JSON line.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "launcher"))
from dlrun.harness import load_harness  # noqa: E402
from dlrun.harness.harness_node import process_started_unix  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="resnet50_v1.5")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup-steps", type=int, default=2)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--precision", choices=("fp32", "amp"), default="fp32")
    p.add_argument("--channels-last", choices=("on", "off"), default="off")
    p.add_argument("--compile", action="store_true")
    # the tuned path's knobs, given to the bare loop as to the harness (default: PyTorch's own ops)
    p.add_argument("--fused-optimizer", choices=("on", "off"), default="off")
    p.add_argument("--fused-bn-relu", choices=("on", "off"), default="off")
    args = p.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    harness = load_harness("pytorch", "models")
    channels_last = args.channels_last == "on"
    torch.manual_seed(1234)
    model = harness.build_model(args.model)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    if args.fused_bn_relu == "on":  # the harness's kernel, asked for: it runs or this exits
        knob = argparse.Namespace(fused_bn_relu="on", precision=args.precision, compile="off",
                                  raw_argv=["--fused-bn-relu", "on"])
        load_harness("pytorch", "bnrelu").fuse(model, knob, channels_last, "cpu")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9,
                                **({"fused": True} if args.fused_optimizer == "on" else {}))
    criterion = nn.CrossEntropyLoss()
    forward = torch.compile(model) if args.compile else model
    c, h, w = harness.default_image_size(args.model)
    images = torch.randn(args.batch_size, c, h, w)
    labels = torch.randint(0, 1000, (args.batch_size,))
    if channels_last:
        images = images.contiguous(memory_format=torch.channels_last)
    amp = args.precision == "amp"
    model.train()

    def step():
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            loss = criterion(forward(images), labels)
        loss.backward()
        optimizer.step()
        return loss

    first_step_unix = time.time()
    start = time.perf_counter()
    for _ in range(args.warmup_steps):
        step()
    warm = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    wall = time.perf_counter() - start
    print(json.dumps({"images_per_sec": args.batch_size * args.steps / wall, "wall_time_s": wall,
                      "warmup_s": warm, "final_loss": float(loss.detach()), "threads": torch.get_num_threads(),
                      "channels_last": channels_last, "precision": args.precision, "model": args.model,
                      "batch_size": args.batch_size, "steps": args.steps, "compiled": args.compile,
                      "time_to_first_step_s": first_step_unix - process_started_unix()}))


if __name__ == "__main__":
    main()
