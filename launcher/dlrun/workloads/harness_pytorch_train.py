"""dlrun PyTorch harness: the training benchmark - the timed training loop,
the statistics of its step rows and the replica check.  Standard library +
torch; runs on Python >= 3.6 with PyTorch >= 1.0.  What it measures is
described in ``harness_pytorch.py``'s notes.
"""

import gc
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn

from harness_pytorch_allocator import ALLOCATOR
from harness_common import (EXIT_DIVERGED, EXIT_NONFINITE,
                            NUM_CLASSES, PERTURB_ENV, REPLICA_RTOL,
                            RULE, HarnessError, NullContext, TimedWindow,
                            cpu_has_native_bf16, error_line, out, perf_stats,
                            quality_fields)
from harness_pytorch_comm import StepClock, in_process_group, sync
from harness_pytorch_data import (FixedBatches, synthetic_images,
                                  synthetic_tokens)
from harness_pytorch_features import (make_adamw, make_grad_scaler,
                                      make_optimizer, maybe_compile,
                                      mkldnn_available, RAN,
                                      resolve_precision,
                                      resolve_channels_last)
from harness_pytorch_models import (BERT_BASE, bert_task, build_model,
                                    count_params, default_image_size,
                                    is_bert)
from harness_pytorch_horovod import setup_dist
from harness_pytorch_process import run_fields

# Defaults where --lr is not given: SGD for the CNNs; AdamW for BERT at the
# fine-tuning rate of the BERT code Ren et al. used (run_swag / run_squad).
CNN_LR = 0.01
BERT_LR = 5e-5
BERT_WEIGHT_DECAY = 0.01

# Training benchmark

def param_checksum(module):
    """(sum, sum of absolute values) of all parameters, in float64."""
    total = 0.0
    total_abs = 0.0
    with torch.no_grad():
        for p in module.parameters():
            d = p.detach().double()
            total += float(d.sum())
            total_abs += float(d.abs().sum())
    return [total, total_abs]


def replicas_agree(cmax, cmin, rtol=REPLICA_RTOL):
    """Whether element-wise MAX and MIN over ranks of the checksum agree to
    ``rtol`` of the absolute-value sum."""
    scale = max(abs(cmax[1]), abs(cmin[1]), 1e-30)
    return all(abs(a - b) <= rtol * scale for a, b in zip(cmax, cmin))


def _maybe_perturb(module, rank):
    """The documented test hook (see the module notes)."""
    value = os.environ.get(PERTURB_ENV)
    if value is None or value.strip() != str(rank):
        return
    with torch.no_grad():
        for p in module.parameters():
            p.add_(1.0)
            break


class _Task(object):
    """What a training step consumes and what the run reports, for an image
    model (instances are images) or a BERT task (instances are SWAG
    examples of 4 sequences, or SQuAD windows of 1; rates count
    sequences)."""

    def __init__(self, args, device_type):
        self.bert = is_bert(args.model)
        if self.bert:
            self.task, self.seq_length, self.per_instance = bert_task(
                args.model, args.seq_length)
            self.num_layers = args.num_layers or BERT_BASE["layers"]
            self.unit, self.dataset = "sequences/sec", self.task
            self.lr = BERT_LR if args.lr is None else args.lr
            if args.channels_last == "on":
                raise HarnessError("--channels-last on: model %s reads "
                                   "tokens, not images" % args.model)
            self.channels_last = False
            return
        for option, value in (("--seq-length", args.seq_length),
                              ("--num-layers", args.num_layers)):
            if value is not None:
                raise HarnessError("%s applies to the BERT models, not to %s"
                                   % (option, args.model))
        self.per_instance = 1
        self.unit, self.dataset = "images/sec", "imagenet"
        self.lr = CNN_LR if args.lr is None else args.lr
        self.channels_last = resolve_channels_last(
            args.channels_last, args.precision, device_type)

    def batches(self, args, rank, world_size, device):
        """What the steps consume: the data under --data-dir, or one
        synthetic batch on the device."""
        if args.data_dir is not None:
            from harness_pytorch_dataset import RealBatches  # needs Pillow
            return RealBatches(args.data_dir, args.batch_size,
                               default_image_size(args.model),
                               args.data_workers, rank, world_size,
                               args.seed, device, self.channels_last)
        seed = args.seed + rank
        if self.bert:
            inputs, targets = synthetic_tokens(
                args.batch_size, self.seq_length, self.per_instance,
                BERT_BASE["vocab_size"], self.task, seed)
        else:
            inputs, targets = synthetic_images(
                args.batch_size, default_image_size(args.model),
                NUM_CLASSES, seed)
            inputs, targets = (inputs,), (targets,)
        return FixedBatches(inputs, targets, device, self.channels_last)

    def criterion(self, device):
        ce = nn.CrossEntropyLoss().to(device)
        if self.bert and self.task == "squad":  # mean of start and end
            return lambda out, targets: (ce(out[0], targets[0])
                                         + ce(out[1], targets[1])) / 2
        return lambda out, targets: ce(out, targets[0])

    def optimizer(self, model, args):
        params = [p for p in model.parameters() if p.requires_grad]
        if self.bert:
            return make_adamw(params, self.lr, BERT_WEIGHT_DECAY,
                              args.fused_optimizer)
        optimizer, fused = make_optimizer(torch.optim.SGD, params,
                                          args.fused_optimizer, lr=self.lr,
                                          momentum=args.momentum)
        return optimizer, "sgd", fused

    def result_fields(self, args, timing, optimizer):
        if self.bert:
            return {
                "unit": self.unit,
                "formula": "world_size*batch_size_per_rank*"
                           "sequences_per_instance*timed_steps/wall_time_s",
                "per_rank_sequences_per_sec": timing["per_rank_rates"],
                "instances_per_sec": timing["total"] / self.per_instance,
                "sequences_per_instance": self.per_instance,
                "task": self.task, "seq_length": self.seq_length,
                "num_layers": self.num_layers, "channels_last": False,
                "optimizer": optimizer, "lr": self.lr,
                "weight_decay": BERT_WEIGHT_DECAY}
        return {
            "unit": self.unit,
            "formula": "world_size*batch_size_per_rank*timed_steps/"
                       "wall_time_s",
            "per_rank_images_per_sec": timing["per_rank_rates"],
            "image_size": list(default_image_size(args.model)),
            "num_classes": NUM_CLASSES,
            "channels_last": self.channels_last,
            "data_format": "NHWC" if self.channels_last else "NCHW",
            "optimizer": optimizer, "lr": self.lr, "momentum": args.momentum}


def _precision(precision, device_type, rank):
    """(autocast factory or None, needs a gradient scaler, the result's
    fields on what ran: precision_ran, amp_dtype, tf32, native_bf16)."""
    autocast, ran, needs_scaler, tf32 = resolve_precision(precision,
                                                          device_type)
    native_bf16 = None
    if ran == "bfloat16" and device_type == "cpu":
        native_bf16 = cpu_has_native_bf16()
        if native_bf16 is False and rank == 0:
            sys.stderr.write(
                "dlrun-harness: warning: --precision %s runs bfloat16 on a "
                "CPU without bfloat16 instructions (no avx512_bf16/amx_bf16): "
                "emulated, usually slower than fp32\n" % precision)
    return autocast, needs_scaler, {
        "precision_ran": RAN[ran], "tf32": tf32, "native_bf16": native_bf16,
        "amp_dtype": ran if autocast is not None else None}


def run_benchmark(args):
    (rank, world_size, rank_source, device_type, device, device_name,
     backend), comm = setup_dist(args)

    autocast, needs_scaler, ran = _precision(args.precision, device_type,
                                             rank)
    task = _Task(args, device_type)

    outcome = in_process_group(comm, _train, args, task, comm, device,
                               autocast or NullContext, needs_scaler)
    if outcome["error"] is not None:
        message, code = outcome["error"]
        if rank == 0:
            error_line(message)
        return code

    timing = outcome["timing"]
    total = timing["total"]
    result = {
        "metric": "throughput",
        "value": total,
        "wall_time_reduction": "max_over_ranks",
        "per_rank_wall_time_s": timing["per_rank_walls"],
        "wall_time_s": timing["wall"],
        "timed_start_unix": timing["start_unix"],  # rank 0's clock
        "world_size": world_size,
        "rank_source": rank_source,
        "num_devices": world_size,
        "model": args.model,
        "params": outcome["params"],
        "batch_size_per_rank": args.batch_size,
        "global_batch_size": args.batch_size * world_size,
        "timed_steps": args.steps,
        "warmup_steps": args.warmup_steps,
        "precision": args.precision,
        "compiled": outcome["compiled"],
        "device": device_type,
        "device_name": device_name,
        "threads": torch.get_num_threads(),
        "mkldnn": mkldnn_available(),
        "backend": backend if world_size > 1 else "none",
        "seed": args.seed,
        "data_workers": args.data_workers,
        "final_loss": outcome["final_loss"],
        "fused_optimizer": outcome["fused_optimizer"],
        "quality": outcome["quality"],
    }
    result.update(ran)
    result.update(task.result_fields(args, timing, outcome["optimizer"]))
    result.update(outcome["data"])
    result.update(run_fields(device_type))
    result.update(comm.fields())
    if rank == 0:
        out(RULE)
        out("total %s: %.2f" % (task.unit, total))
        out(RULE)
        out("DLRUN_RESULT " + json.dumps(result, sort_keys=True))
    return 0


def _header(args, task, world_size, devices, optimizer):
    out("PyTorch:     %s" % torch.__version__)
    out("Model:       %s" % args.model)
    out("Dataset:     %s (%s)" % (task.dataset, task.data_label))
    out("Mode:        training")
    out("Batch size:  %d global" % (args.batch_size * world_size))
    out("             %d per device" % args.batch_size)
    if task.bert:
        out("Sequences:   %d tokens, %d per %s, %d layers"
            % (task.seq_length, task.per_instance,
               "example" if task.per_instance > 1 else "instance",
               task.num_layers))
    out("Num batches: %d" % args.steps)
    out("Devices:     %s" % devices)
    if not task.bert:
        out("Data format: %s" % ("NHWC" if task.channels_last else "NCHW"))
    out("Precision:   %s" % args.precision)
    out("Optimizer:   %s" % optimizer)
    library = ALLOCATOR["library"]
    out("Allocator:   %s%s" % (ALLOCATOR["name"],
                               " (%s)" % library if library else ""))
    out("Variables:   %s" % (getattr(args, "dist", "ddp") if world_size > 1
                               else "replicated"))
    out("==========")
    out("Running warm up")


def _train(args, task, comm, device, autocast, needs_scaler):
    """Build, warm up, time and check.  All references to the model and the
    optimizer live in this frame, so they are gone when it returns."""
    window = TimedWindow()  # from here: judged over the whole benchmark where the timed steps are too short
    rank, world_size = comm.rank, comm.world_size
    channels_last = task.channels_last
    torch.manual_seed(args.seed)
    model = build_model(args.model, args.num_layers)
    params = count_params(model)
    model = model.to(device)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    raw_model = model
    if world_size > 1:
        model = comm.wrap_model(model, device)
    model, compiled = maybe_compile(model, args.compile)
    optimizer, optimizer_name, fused = task.optimizer(raw_model, args)
    scaler = make_grad_scaler() if needs_scaler else None
    optimizer, scaler = comm.wrap_optimizer(optimizer, raw_model, scaler)
    criterion = task.criterion(device)

    source = task.batches(args, rank, world_size, device)
    task.data_label = source.label()
    model.train()

    def step():
        inputs, targets = source.next()
        optimizer.zero_grad()
        with autocast():
            loss = criterion(model(*inputs), targets)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        return loss.detach()

    # Rates count sequences for BERT (a SWAG example is 4), images otherwise.
    per_step = args.batch_size * task.per_instance
    # One device per rank: /gpu:<index> or /cpu:0, as tf_cnn_benchmarks.
    index = device.index if device.type == "cuda" else 0
    kind = "gpu" if device.type == "cuda" else "cpu"
    devices = ["/%s:%d" % (kind, int(g[0]))
               for g in comm.all_gather([float(index)])]
    if rank == 0:
        _header(args, task, world_size, devices, optimizer_name)
    for _ in range(args.warmup_steps):
        step()
    sync(device)
    comm.barrier()
    sync(device)
    if rank == 0:
        out("Done warm up")
        out("Step\t%s\ttotal_loss"
            % ("Seq/sec" if task.bert else "Img/sec"))

    loss = None
    window.start()
    start_unix = time.time()  # where the timed window lies (telemetry)
    start = time.perf_counter()
    clock = StepClock(device)
    for i in range(args.steps):
        loss = step()
        clock.step_done()
        n = i + 1
        if n == 1 or n % args.display_every == 0:
            step_times = clock.settle()
            value = float(loss)
            if rank == 0:
                rate, err, jitter = perf_stats(world_size * per_step,
                                               step_times)
                out("%d\t%s: %.1f +/- %.1f (jitter = %.1f)\t%.3f"
                    % (n, task.unit, rate, err, jitter, value))
            if world_size == 1 and not _finite(value):
                raise HarnessError("loss is not finite (%r) at step %d"
                                   % (value, n), EXIT_NONFINITE)
            clock.restart()
    sync(device)
    wall = time.perf_counter() - start
    window_row = window.stop(clock.settle(), torch.get_num_threads())
    final_loss = float(loss)

    outcome = {"error": None, "params": params, "compiled": compiled,
               "final_loss": final_loss, "optimizer": optimizer_name,
               "fused_optimizer": fused, "data": source.fields()}
    source.close()
    # Collective checks: every rank reaches the same verdict.
    bad_loss = comm.all_reduce([0.0 if _finite(final_loss) else 1.0],
                               "MAX")[0]
    if bad_loss:
        outcome["error"] = ("loss is not finite (rank 0: %r) after %d steps"
                            % (final_loss, args.steps), EXIT_NONFINITE)
    if world_size > 1 and outcome["error"] is None:
        _maybe_perturb(raw_model, rank)
        checksum = param_checksum(raw_model)
        cmax = comm.all_reduce(checksum, "MAX")
        cmin = comm.all_reduce(checksum, "MIN")
        if not replicas_agree(cmax, cmin):
            outcome["error"] = (
                "replicas diverged: parameter checksums (sum, abs sum) "
                "differ across %d ranks: max %r, min %r (relative "
                "tolerance %g)" % (world_size, cmax, cmin, REPLICA_RTOL),
                EXIT_DIVERGED)

    if outcome["error"] is None:
        rate = per_step * args.steps / wall
        gathered = comm.all_gather([rate, wall])
        max_wall = comm.all_reduce([wall], "MAX")[0]
        outcome["timing"] = {
            "per_rank_rates": [g[0] for g in gathered],
            "per_rank_walls": [g[1] for g in gathered],
            "wall": max_wall,
            "total": world_size * per_step * args.steps / max_wall,
            "start_unix": start_unix,
        }
        outcome["quality"] = quality_fields(comm.all_gather(window_row))
    # Clean teardown: no rank may destroy the process group while a DDP
    # model is alive anywhere, so meet first, then drop every reference.
    comm.barrier()
    del model, raw_model, optimizer, scaler, step, source, loss
    gc.collect()
    return outcome


def _finite(value):
    return not (math.isnan(value) or math.isinf(value))
