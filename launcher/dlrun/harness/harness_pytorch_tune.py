"""dlrun PyTorch harness: a tuning trial for ``dlrun tune``.  Standard
library + torch; runs on Python >= 3.6 with PyTorch >= 1.0.

dlrun's tuner sets DLRUN_TUNE_TRIAL to a JSON object::

    {"base": {"fused_optimizer": "on"},
     "grid": {"fused_optimizer": ["on", "off"], "channels_last": ["on", "off"]},
     "extras": [{"threads": 1}, {"compile": "on"}],
     "rounds": 4, "min_rounds": 2, "warmup": 1, "budget_s": 30}

The variants are the reference (the knobs at their defaults here, with
``base``'s fixed values), every point of ``grid``, and each of ``extras``
on top of the reference (``variant_knobs``); knobs that do not apply (BERT
has no channels-last, a CPU no cuDNN) are not varied.

and starts the harness as a run would be started (one rank, the run's
model, batch, precision, allocator and thread pinning, which are settled
per process).  Instead of the benchmark, the harness then builds the model
once per layout (channels-last or not, compiled or not) and an optimizer
per step kind (fused or not) over it - the fused batch norm + ReLU is
switched on and off on the same model - and times single training steps of
every variant in alternation - the order reversed every round - so that a
change in the machine's load hits all variants alike.  A round is one step
of every variant; rounds stop after ``rounds``, or after ``min_rounds`` once
``budget_s`` seconds have passed.  Warm-up steps are untimed; the first
one's time is kept apart (it holds torch.compile's compilation).

Rank 0 prints one line ``DLRUN_TUNE {json}``: per variant the knobs as
asked, what ran (fused, channels_last, compiled), the wall and CPU seconds
of every timed step, the first and all warm-up seconds; and the process's
allocator, pinned CPUs and thread count.  The data is synthetic (a knob
changes the speed of the step, not what it reads).
"""

import copy
import itertools
import json
import time

import torch

from harness_common import HarnessError, out
from harness_pytorch_allocator import ALLOCATOR
from harness_pytorch_bnrelu import fuse, switch
from harness_pytorch_comm import sync
from harness_pytorch_features import make_grad_scaler, maybe_compile
from harness_pytorch_knobs import PINNING
from harness_pytorch_process import setup_process
from harness_pytorch_llama import is_llama
from harness_pytorch_tasks import make_task
from harness_pytorch_train import _precision

TUNE_MARKER = "DLRUN_TUNE "


class _Variant(object):
    """One combination of knobs: its model (shared with the variants of the
    same layout), its optimizer and its step."""

    def __init__(self, knobs, layout, args):
        self.knobs = knobs
        self.layout = layout
        vargs = copy.copy(args)
        vargs.fused_optimizer = knobs.get("fused_optimizer",
                                          args.fused_optimizer)
        if vargs.fused_optimizer == "on":  # fused where it exists; recorded
            vargs.fused_optimizer = "available"
        self.optimizer, _, self.fused = layout.task.optimizer(
            layout.raw, vargs, vargs.fused_optimizer)
        self.threads = int(knobs.get("threads") or torch.get_num_threads())
        self.cudnn = knobs.get("cudnn_benchmark", "auto") != "off"
        self.bn_relu = layout.bn_relu and knobs.get("fused_bn_relu") == "on"
        self.step_s, self.cpu_s, self.warmup_s = [], [], []

    def record(self):
        return {"knobs": self.knobs, "fused": self.fused,
                "fused_bn_relu": self.bn_relu,
                "channels_last": self.layout.task.channels_last,
                "compiled": self.layout.compiled, "step_s": self.step_s,
                "cpu_s": self.cpu_s, "warmup_s": self.warmup_s}


class _Layout(object):
    """A model in one memory format, compiled or not, with its data."""

    def __init__(self, args, knobs, device_type, device):
        largs = copy.copy(args)
        largs.channels_last = knobs.get("channels_last", args.channels_last)
        self.task = make_task(largs, device_type)
        torch.manual_seed(args.seed)
        model = self.task.build(largs).to(device)
        if self.task.channels_last:
            model = model.to(memory_format=torch.channels_last)
        self.raw = model
        auto = copy.copy(largs)
        auto.fused_bn_relu = "available"  # where it runs, measured or not
        auto.compile = knobs.get("compile", args.compile)
        self.bn_relu = fuse(model, auto, self.task.channels_last,
                            device_type)[0] == "on"
        self.model, self.compiled = maybe_compile(
            model, knobs.get("compile", args.compile) == "on")
        self.model.train()
        self.source = self.task.batches(largs, args.batch_size, 0, 1,
                                       device)
        self.criterion = self.task.criterion(device)


def _on_off(flag):
    return "on" if flag else "off"


def knob_defaults(args, device_type):
    """What each knob left at auto resolves to here, as explicit values."""
    task = make_task(args, device_type)
    fused = task.optimizer(torch.nn.Linear(2, 2), args,
                           args.fused_optimizer)[2]
    cuda = device_type == "cuda"
    bn_relu = "n/a" if task.bert or task.llm else fuse(
        task.build(args), args, task.channels_last, device_type)[0]
    return {"fused_optimizer": _on_off(fused), "fused_bn_relu": bn_relu,
            "channels_last": "n/a" if task.bert or task.llm else _on_off(
                task.channels_last),
            "compile": _on_off(args.compile == "on"),
            "cudnn_benchmark": _on_off(args.cudnn_benchmark != "off")
            if cuda else "n/a",
            "threads": torch.get_num_threads()}


def variant_knobs(spec, defaults):
    """The knobs of every variant, the reference first: ``base`` (the
    defaults with the spec's fixed knobs), then each point of ``grid`` (every
    combination of the listed values), then each of ``extras`` on top of
    the reference.  Knobs that do not apply here (n/a) are not varied."""
    base = dict(defaults)
    base.update(spec.get("base") or {})
    grid = dict((k, v) for k, v in (spec.get("grid") or {}).items()
                if defaults.get(k) != "n/a" and isinstance(v, list))
    points = [base]
    names = sorted(grid)
    for combo in itertools.product(*(grid[n] for n in names)):
        points.append(dict(base, **dict(zip(names, combo))))
    for extra in spec.get("extras") or []:
        if isinstance(extra, dict) and all(defaults.get(k) != "n/a"
                                           for k in extra):
            points.append(dict(base, **extra))
    unique = []
    for point in points:
        if point not in unique:
            unique.append(point)
    return unique


def _variants(args, points, device_type, device):
    layouts, variants = {}, []
    for knobs in points:
        key = (knobs.get("channels_last"), knobs.get("compile"))
        if key not in layouts:
            layouts[key] = _Layout(args, knobs, device_type, device)
        variants.append(_Variant(knobs, layouts[key], args))
    return variants


def _stepper(device, autocast, scaler):
    cudnn = getattr(torch.backends, "cudnn", None)

    def step(v):
        torch.set_num_threads(v.threads)
        if v.layout.bn_relu:
            switch(v.layout.raw, v.bn_relu)
        if device.type == "cuda" and cudnn is not None:
            cudnn.benchmark = v.cudnn
        inputs, targets = v.layout.source.next()
        v.optimizer.zero_grad()
        with autocast():
            loss = v.layout.criterion(v.layout.model(*inputs), targets)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(v.optimizer)
            scaler.update()
        else:
            loss.backward()
            v.optimizer.step()
        sync(device)
    return step


def _timed(step, v, into_wall, into_cpu):
    wall, cpu = time.perf_counter(), time.process_time()
    step(v)
    into_wall.append(time.perf_counter() - wall)
    if into_cpu is not None:
        into_cpu.append(time.process_time() - cpu)


def run_trial(args, spec):
    (rank, world_size, _, device_type, device, device_name,
     _) = setup_process(args)
    if world_size != 1:
        raise HarnessError("a tuning trial runs one rank, not %d"
                           % world_size)
    threads_max = torch.get_num_threads()
    autocast, needs_scaler, ran = _precision(args.precision, device_type, 0,
                                             is_llama(args.model))
    scaler = make_grad_scaler() if needs_scaler else None
    started = time.perf_counter()
    defaults = knob_defaults(args, device_type)
    variants = _variants(args, variant_knobs(spec, defaults), device_type,
                         device)
    step = _stepper(device, autocast, scaler)
    for v in variants:
        for _ in range(max(int(spec.get("warmup", 1)), 1)):
            _timed(step, v, v.warmup_s, None)
    rounds = max(int(spec.get("rounds", 3)), 1)
    least = min(max(int(spec.get("min_rounds", 2)), 1), rounds)
    budget = float(spec.get("budget_s", 1e9))
    done = 0
    while done < rounds and (done < least
                             or time.perf_counter() - started < budget):
        order = variants if done % 2 == 0 else variants[::-1]
        for v in order:
            _timed(step, v, v.step_s, v.cpu_s)
        done += 1
    record = {"variants": [v.record() for v in variants], "rounds": done,
              "seconds": time.perf_counter() - started,
              "allocator": ALLOCATOR["name"], "pinned_cpus": PINNING["cpus"],
              "threads_max": threads_max, "defaults": defaults,
              "device": device_type,
              "device_name": device_name, "model": args.model,
              "batch_size": args.batch_size, "precision": args.precision,
              "torch": torch.__version__}
    record.update(ran)
    out(TUNE_MARKER + json.dumps(record, sort_keys=True))
    return 0
