"""dlrun PyTorch harness: the training benchmark - the timed training loop,
the statistics of its step rows and the replica check.  Standard library +
torch; runs on Python >= 3.6 with PyTorch >= 1.0.  What it measures is
described in ``harness_pytorch.py``'s notes.
"""

import gc
import json
import math
import os
import time

import torch
import torch.nn as nn

from harness_pytorch_allocator import ALLOCATOR
from harness_pytorch_common import (EXIT_DIVERGED, EXIT_NONFINITE,
                                    NUM_CLASSES, PERTURB_ENV, REPLICA_RTOL,
                                    RULE, HarnessError, NullContext,
                                    error_line, out)
from harness_pytorch_comm import Comm, in_process_group, sync, wrap_ddp
from harness_pytorch_data import synthetic_images
from harness_pytorch_features import (make_grad_scaler, maybe_compile,
                                      mkldnn_available, resolve_amp,
                                      resolve_channels_last)
from harness_pytorch_models import (build_model, count_params,
                                    default_image_size)
from harness_pytorch_process import run_fields, setup_process


# ---------------------------------------------------------------------------
# Training benchmark
# ---------------------------------------------------------------------------

def perf_stats(batch, step_times):
    """tf_cnn_benchmarks statistics: (mean rate, standard error, jitter)."""
    times = [t for t in step_times if t > 0]
    if not times:
        return 0.0, 0.0, 0.0
    speeds = [batch / t for t in times]
    n = len(speeds)
    mean = batch * n / sum(times)
    avg = sum(speeds) / n
    std = math.sqrt(sum((s - avg) ** 2 for s in speeds) / n)
    med = _median(speeds)
    jitter = 1.4826 * _median([abs(s - med) for s in speeds])
    return mean, std / math.sqrt(n), jitter


def _median(values):
    v = sorted(values)
    n = len(v)
    mid = n // 2
    return v[mid] if n % 2 else 0.5 * (v[mid - 1] + v[mid])


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


def run_benchmark(args):
    (rank, world_size, rank_source, device_type, device, device_name,
     backend) = setup_process(args)

    if args.precision == "amp":
        autocast, amp_dtype, needs_scaler = resolve_amp(device_type)
    else:
        autocast, amp_dtype, needs_scaler = NullContext, None, False
    channels_last = resolve_channels_last(args.channels_last, args.precision,
                                          device_type)

    comm = Comm(rank, world_size, backend, device)
    outcome = in_process_group(comm, _train, args, comm, device, autocast,
                               needs_scaler, channels_last)
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
        "unit": "images/sec",
        "formula": "world_size*batch_size_per_rank*timed_steps/wall_time_s",
        "wall_time_reduction": "max_over_ranks",
        "per_rank_images_per_sec": timing["per_rank_rates"],
        "per_rank_wall_time_s": timing["per_rank_walls"],
        "wall_time_s": timing["wall"],
        "world_size": world_size,
        "rank_source": rank_source,
        "num_devices": world_size,
        "model": args.model,
        "params": outcome["params"],
        "image_size": list(default_image_size(args.model)),
        "num_classes": NUM_CLASSES,
        "batch_size_per_rank": args.batch_size,
        "global_batch_size": args.batch_size * world_size,
        "timed_steps": args.steps,
        "warmup_steps": args.warmup_steps,
        "precision": args.precision,
        "amp_dtype": amp_dtype,
        "channels_last": channels_last,
        "data_format": "NHWC" if channels_last else "NCHW",
        "compiled": outcome["compiled"],
        "device": device_type,
        "device_name": device_name,
        "threads": torch.get_num_threads(),
        "mkldnn": mkldnn_available(),
        "backend": backend if world_size > 1 else "none",
        "optimizer": "sgd",
        "lr": args.lr,
        "momentum": args.momentum,
        "seed": args.seed,
        "data_workers": args.data_workers,
        "final_loss": outcome["final_loss"],
    }
    result.update(run_fields(device_type))
    if rank == 0:
        out(RULE)
        out("total images/sec: %.2f" % total)
        out(RULE)
        out("DLRUN_RESULT " + json.dumps(result, sort_keys=True))
    return 0


def _train(args, comm, device, autocast, needs_scaler, channels_last):
    """Build, warm up, time and check.  All references to the model and the
    optimizer live in this frame, so they are gone when it returns."""
    rank, world_size = comm.rank, comm.world_size
    torch.manual_seed(args.seed)
    model = build_model(args.model)
    params = count_params(model)
    model = model.to(device)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    raw_model = model
    if world_size > 1:
        model = wrap_ddp(model, device)
    model, compiled = maybe_compile(model, args.compile)
    optimizer = torch.optim.SGD(raw_model.parameters(), lr=args.lr,
                                momentum=args.momentum)
    scaler = make_grad_scaler() if needs_scaler else None
    criterion = nn.CrossEntropyLoss().to(device)

    images, labels = synthetic_images(args.batch_size,
                                      default_image_size(args.model),
                                      NUM_CLASSES, args.seed + rank)
    images = images.to(device)
    labels = labels.to(device)
    if channels_last:
        images = images.contiguous(memory_format=torch.channels_last)
    model.train()

    def step():
        optimizer.zero_grad()
        with autocast():
            loss = criterion(model(images), labels)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        return loss.detach()

    global_batch = args.batch_size * world_size
    # One device per rank: /gpu:<index> or /cpu:0, as tf_cnn_benchmarks.
    index = device.index if device.type == "cuda" else 0
    kind = "gpu" if device.type == "cuda" else "cpu"
    devices = ["/%s:%d" % (kind, int(g[0]))
               for g in comm.all_gather([float(index)])]
    if rank == 0:
        out("PyTorch:     %s" % torch.__version__)
        out("Model:       %s" % args.model)
        out("Dataset:     imagenet (synthetic)")
        out("Mode:        training")
        out("Batch size:  %d global" % global_batch)
        out("             %d per device" % args.batch_size)
        out("Num batches: %d" % args.steps)
        out("Devices:     %s" % devices)
        out("Data format: %s" % ("NHWC" if channels_last else "NCHW"))
        out("Precision:   %s" % args.precision)
        out("Optimizer:   sgd")
        library = ALLOCATOR["library"]
        out("Allocator:   %s%s" % (ALLOCATOR["name"],
                                   " (%s)" % library if library else ""))
        out("Variables:   %s" % ("ddp" if world_size > 1 else "replicated"))
        out("==========")
        out("Running warm up")
    for _ in range(args.warmup_steps):
        step()
    sync(device)
    comm.barrier()
    sync(device)
    if rank == 0:
        out("Done warm up")
        out("Step\tImg/sec\ttotal_loss")

    step_times = []
    loss = None
    start = time.perf_counter()
    last = start
    for i in range(args.steps):
        loss = step()
        sync(device)
        now = time.perf_counter()
        step_times.append(now - last)
        n = i + 1
        if n == 1 or n % args.display_every == 0:
            value = float(loss)
            if rank == 0:
                rate, err, jitter = perf_stats(global_batch, step_times)
                out("%d\timages/sec: %.1f +/- %.1f (jitter = %.1f)\t%.3f"
                    % (n, rate, err, jitter, value))
            if world_size == 1 and not _finite(value):
                raise HarnessError("loss is not finite (%r) at step %d"
                                   % (value, n), EXIT_NONFINITE)
            last = time.perf_counter()
        else:
            last = now
    sync(device)
    wall = time.perf_counter() - start
    final_loss = float(loss)

    outcome = {"error": None, "params": params, "compiled": compiled,
               "final_loss": final_loss}
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
        rate = args.batch_size * args.steps / wall
        gathered = comm.all_gather([rate, wall])
        max_wall = comm.all_reduce([wall], "MAX")[0]
        outcome["timing"] = {
            "per_rank_rates": [g[0] for g in gathered],
            "per_rank_walls": [g[1] for g in gathered],
            "wall": max_wall,
            "total": world_size * args.batch_size * args.steps / max_wall,
        }
    # Clean teardown: no rank may destroy the process group while a DDP
    # model is alive anywhere, so meet first, then drop every reference.
    comm.barrier()
    del model, raw_model, optimizer, scaler, step, images, labels, loss
    gc.collect()
    return outcome


def _finite(value):
    return not (math.isnan(value) or math.isinf(value))
