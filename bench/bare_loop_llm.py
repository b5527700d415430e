"""A hand-written LLM pretraining loop: the yardstick for dlrun's LLM harness (benchmark 12).

Same decoder (the harness's own `build_llama`), same optimizer (AdamW, betas 0.9/0.95, weight decay 0.1,
fused where PyTorch has it, as the harness's default), same loss, same fixed batch of synthetic tokens kept
in memory, same threads and precision; nothing else: no logging, no per-step timing, no data-stall timing,
no rank detection, no checks. Prints one JSON line.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "launcher"))
from dlrun.harness import load_harness  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="llama3_tiny")
    p.add_argument("--seq-length", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup-steps", type=int, default=2)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--precision", choices=("fp32", "amp"), default="fp32")
    args = p.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    llama = load_harness("pytorch", "llama")
    torch.manual_seed(1234)
    model = llama.build_llama(args.model, args.seq_length)
    cfg = model.cfg
    try:
        optimizer = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], betas=(0.9, 0.95), weight_decay=0.1,
                                      fused=True)
    except (TypeError, RuntimeError):
        optimizer = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], betas=(0.9, 0.95), weight_decay=0.1)
    gen = torch.Generator().manual_seed(1234)
    block = torch.randint(0, cfg["vocab_size"], (args.batch_size, args.seq_length + 1), generator=gen)
    inputs, targets = block[:, :-1], block[:, 1:]
    amp = args.precision == "amp"
    model.train()

    def step():
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            loss = llama.lm_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        return loss

    for _ in range(args.warmup_steps):
        step()
    start = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    wall = time.perf_counter() - start
    print(json.dumps({"tokens_per_sec": args.batch_size * args.seq_length * args.steps / wall,
                      "wall_time_s": wall, "final_loss": float(loss.detach()), "threads": torch.get_num_threads(),
                      "model": args.model, "seq_length": args.seq_length, "batch_size": args.batch_size,
                      "steps": args.steps, "precision": args.precision}))


if __name__ == "__main__":
    main()
