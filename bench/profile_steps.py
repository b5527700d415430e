"""Where a training step's time goes: shares of the step per kind of operator (torch.profiler, self time), for
the harness's own model, data and optimizer. Shares, not seconds: a shared machine stretches every operator
alike, so the split survives load that makes the absolute times useless. Not part of `make bench`.

    OMP_NUM_THREADS=1 LD_PRELOAD=libtcmalloc_minimal.so.4 python bench/profile_steps.py resnet50_v1.5 --batch-size 16

Prints one JSON line: per kind (convolution forward, convolution backward, batch norm forward/backward, ReLU
and its backward, the residual additions, pooling and the classifier, the optimizer step, everything else)
its share of the profiled steps, the top operators, and for the convolutions the share of layer 4's (7x7
outputs at 224x224 input).
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from common import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "launcher" / "dlrun" / "harness"))
import harness_pytorch_data as data  # noqa: E402
import harness_pytorch_features as features  # noqa: E402
import harness_pytorch_models as models  # noqa: E402

#: Operator name fragments -> kind, first match wins (ATen and oneDNN names of torch 2.x on CPU).
KINDS = (
    ("convolution backward", ("convolution_backward", "mkldnn_convolution_backward")),
    ("convolution forward", ("mkldnn_convolution", "convolution", "_convolution", "conv2d")),
    ("batch norm backward", ("batch_norm_backward", "native_batch_norm_backward")),
    ("batch norm forward", ("batch_norm", "native_batch_norm")),
    ("ReLU backward", ("threshold_backward",)),
    ("ReLU forward", ("relu",)),
    ("optimizer step", ("_fused_sgd", "_fused_adamw", "sgd", "adamw", "_foreach", "Optimizer.step")),
    ("residual add / grad accumulation", ("aten::add", "add_")),
    ("pooling", ("pool", "max_pool", "avg_pool", "adaptive")),
    ("classifier and loss", ("addmm", "mm", "linear", "cross_entropy", "log_softmax", "nll_loss")),
    ("zeroing and copies", ("fill_", "zero_", "copy_", "empty", "clone", "contiguous", "to")),
)


def kind_of(name: str) -> str:
    low = name.lower()
    for kind, fragments in KINDS:
        if any(f.lower() in low for f in fragments):
            return kind
    return "other"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("model", nargs="?", default="resnet50_v1.5")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--fused", choices=("on", "off"), default="on")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = models.build_model(args.model).to(memory_format=torch.channels_last)
    x, y = data.synthetic_images(args.batch_size, models.default_image_size(args.model), 1000, 1)
    x = x.contiguous(memory_format=torch.channels_last)
    opt, fused = features.make_optimizer(torch.optim.SGD, model.parameters(), args.fused, lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    def step() -> None:
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        with record_function("Optimizer.step"):
            opt.step()

    step(), step()  # warm-up: oneDNN primitives, optimizer state, allocator
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(args.steps):
            step()
    shares: dict[str, float] = defaultdict(float)
    ops: dict[str, float] = defaultdict(float)
    seven = 0.0  # convolutions on 7x7 inputs: layer 4 of a ResNet at 224x224
    for event in prof.key_averages(group_by_input_shape=True):
        if event.key == "Optimizer.step":
            continue
        kind = kind_of(event.key)
        shares[kind] += event.self_cpu_time_total
        ops[event.key] += event.self_cpu_time_total
        shape = (event.input_shapes or [[]])[0]
        if kind.startswith("convolution") and len(shape) == 4 and shape[2:] == [7, 7]:
            seven += event.self_cpu_time_total
    total = sum(shares.values())
    conv = shares["convolution forward"] + shares["convolution backward"]
    top = sorted(ops.items(), key=lambda item: -item[1])[:15]
    print(json.dumps({"model": args.model, "batch": args.batch_size, "threads": args.threads, "fused": fused,
                      "steps": args.steps, "total_self_s": total / 1e6,
                      "shares": {k: round(v / total, 4) for k, v in sorted(shares.items(), key=lambda i: -i[1])},
                      "convolutions_on_7x7_share_of_step": round(seven / total, 4),
                      "convolutions_on_7x7_share_of_convolutions": round(seven / conv, 4) if conv else None,
                      "top_ops": [[k, round(v / total, 4)] for k, v in top]}))


if __name__ == "__main__":
    main()
