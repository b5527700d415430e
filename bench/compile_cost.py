"""torch.compile (inductor) on the CPU, in CPU seconds: what compiling costs, and what a compiled training step
costs against an eager one, for the harness's own models (ResNet-50 v1.5 fp32 NHWC, BERT-base SQuAD, the LLM
llama3_tiny). Not part of `make bench` (compiling takes minutes).

In one process with one thread (CPU seconds; no OpenMP barrier to stall on a shared machine): build the model
twice from one seed, compile one; the compiled model's first steps (where inductor compiles forward and
backward) are timed apart; then rounds alternate one eager and one compiled step (order flipped every round).
Prints one JSON line: compile CPU seconds, per-round eager and compiled step CPU seconds, and the geometric mean
of compiled / eager speed with its 95 % interval. Inductor compiles its kernels in a pool of worker processes
unless TORCHINDUCTOR_COMPILE_THREADS=1 (set here before torch loads), so that this process's CPU time holds the
whole compilation; the compile's wall seconds are reported too.

    OMP_NUM_THREADS=1 LD_PRELOAD=libtcmalloc_minimal.so.4 python bench/compile_cost.py resnet50_v1.5 --rounds 4
    ... python bench/compile_cost.py bert-base-squad --rounds 4
    ... python bench/compile_cost.py llama3_tiny --batch-size 4 --rounds 4
"""
from __future__ import annotations

import argparse
import atexit
import json
import os
import resource
import shutil
import sys
import tempfile
import time

os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # compile in this process: its CPU time is counted
# A cold compile, as on a machine's first run: inductor's on-disk caches would otherwise hand back kernels an
# earlier run compiled (a warm cache cut the LLM's compile from 39 s to 6 s of wall time).
if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="dlrun-inductor-")
    atexit.register(shutil.rmtree, os.environ["TORCHINDUCTOR_CACHE_DIR"], True)
import torch  # noqa: E402

from common import REPO_ROOT, ratio_interval

sys.path.insert(0, str(REPO_ROOT / "launcher" / "dlrun" / "harness"))
import harness_pytorch_data as data  # noqa: E402
import harness_pytorch_features as features  # noqa: E402
import harness_pytorch_llama as llama  # noqa: E402
import harness_pytorch_models as models  # noqa: E402


def _setup_llm(name: str, batch: int, layers: int | None):
    model = llama.build_llama(name, num_layers=layers)
    cfg = model.cfg
    tokens = torch.randint(0, cfg["vocab_size"], (batch, cfg["seq_length"] + 1))
    opt = features.make_adamw(list(model.parameters()), 3e-4, 0.1, "on")[0]
    return model, opt, lambda m: llama.lm_loss(m(tokens[:, :-1]), tokens[:, 1:])


def _setup(name: str, batch: int, layers: int | None):
    torch.manual_seed(0)
    if llama.is_llama(name):
        return _setup_llm(name, batch, layers)
    if models.is_bert(name):
        model = models.build_model(name, layers)
        (ids, types, mask), (start, end) = data.synthetic_tokens(batch, 384, 1, 30522, "squad", 1)
        ce = torch.nn.CrossEntropyLoss()
        opt = features.make_adamw([p for p in model.parameters() if p.requires_grad], 5e-5, 0.01, "on")[0]

        def loss(m):
            a, b = m(ids, types, mask)
            return (ce(a, start) + ce(b, end)) / 2
        return model, opt, loss
    model = models.build_model(name).to(memory_format=torch.channels_last)
    x, y = data.synthetic_images(batch, models.default_image_size(name), 1000, 1)
    x = x.contiguous(memory_format=torch.channels_last)
    opt = features.make_optimizer(torch.optim.SGD, model.parameters(), "on", lr=0.01, momentum=0.9)[0]
    ce = torch.nn.CrossEntropyLoss()
    return model, opt, lambda m: ce(m(x), y)


def _children_cpu() -> float:
    """User + system CPU seconds of every child process waited for (inductor's C++ compiler runs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("model", nargs="?", default="resnet50_v1.5")
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--num-layers", type=int, default=None)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--compile-steps", type=int, default=2, help="first compiled steps timed as compiling")
    args = p.parse_args()
    torch.set_num_threads(1)
    batch = args.batch_size or (2 if models.is_bert(args.model) or llama.is_llama(args.model) else 16)
    eager, eager_opt, eager_loss = _setup(args.model, batch, args.num_layers)
    raw, compiled_opt, compiled_loss = _setup(args.model, batch, args.num_layers)
    compiled = torch.compile(raw)
    eager.train(), compiled.train()

    def step(model, opt, loss) -> float:
        start = time.process_time()
        opt.zero_grad()
        loss(model).backward()
        opt.step()
        return time.process_time() - start

    first_eager = step(eager, eager_opt, eager_loss)
    wall, children = time.perf_counter(), _children_cpu()
    compile_steps = [step(compiled, compiled_opt, compiled_loss) for _ in range(args.compile_steps)]
    wall, children = time.perf_counter() - wall, _children_cpu() - children
    out: dict = {"model": args.model, "batch": batch, "torch": torch.__version__, "threads": 1,
                 "first_eager_step_cpu_s": first_eager, "first_compiled_steps_cpu_s": compile_steps,
                 "first_compiled_steps_wall_s": wall, "compiler_processes_cpu_s": children,
                 "inductor_cache": os.environ["TORCHINDUCTOR_CACHE_DIR"],
                 "compile_threads": os.environ["TORCHINDUCTOR_COMPILE_THREADS"],
                 "eager_cpu_s": [], "compiled_cpu_s": []}
    for r in range(args.rounds):
        order = (("eager", eager, eager_opt, eager_loss), ("compiled", compiled, compiled_opt, compiled_loss))
        for name, model, opt, loss in (order if r % 2 == 0 else order[::-1]):
            out[f"{name}_cpu_s"].append(step(model, opt, loss))
        print(r, {k: round(out[f"{k}_cpu_s"][-1], 2) for k in ("eager", "compiled")}, file=sys.stderr, flush=True)
    steady = min(out["compiled_cpu_s"])
    # beyond what the steps cost; the C++ compiler runs as child processes, whose CPU time is added
    out["compile_cpu_s"] = sum(compile_steps) - args.compile_steps * steady + children
    out["compiled_over_eager_speed"] = ratio_interval([e / c for e, c in zip(out["eager_cpu_s"],
                                                                              out["compiled_cpu_s"])])
    print(json.dumps(out))


if __name__ == "__main__":
    main()
