"""dlrun PyTorch harness: the training benchmark - the timed training loop
(gradient accumulation, data-stall time, checkpoints), the statistics of its
step rows and the end-of-run checks.  Standard library + torch; Python >= 3.6,
PyTorch >= 1.0.  What it measures: ``harness_pytorch.py``'s notes (per-rank
step times: ``harness_pytorch_ranktime.py``); what a step consumes per kind of
model: ``harness_pytorch_tasks.py``."""

import math
import os
import socket
import sys
import time
import zlib

import torch

from harness_pytorch_allocator import ALLOCATOR
from harness_pytorch_bnrelu import fuse
from harness_common import (EXIT_NONFINITE, RULE, HarnessError, NullContext,
                            TimedWindow, cpu_has_native_bf16, error_line, out,
                            perf_stats, print_result, quality_fields, first_step_fields)
from harness_contract import LLM_KIND, PRECISION_OF_DTYPE
from harness_pytorch_checkpoint import Checkpointer
from harness_pytorch_comm import (StepClock, in_process_group,  # noqa
                                  param_checksum, replicas_agree, sync,
                                  collect_garbage)
from harness_pytorch_features import (make_grad_scaler, maybe_compile,
                                      mkldnn_available, resolve_precision)
from harness_pytorch_horovod import setup_dist
from harness_pytorch_knobs import knob_fields
from harness_pytorch_loader import loader_fields, measure_loader
from harness_pytorch_mfu import mfu_fields
from harness_pytorch_models import count_params
from harness_pytorch_process import run_fields
from harness_pytorch_ranktime import RankClock, rank_fields
from harness_pytorch_tasks import make_task


def accumulation(args, devices_per_step):
    """Micro-batches per optimizer step for --global-batch-size (instances
    over every device), 1 without it."""
    if args.global_batch_size is None:
        return 1
    per_micro = args.batch_size * devices_per_step
    if args.global_batch_size % per_micro:
        raise HarnessError("--global-batch-size %d is not a multiple of "
                           "--batch-size %d x %d devices = %d; valid: a "
                           "multiple of %d" % (args.global_batch_size,
                                               args.batch_size,
                                               devices_per_step, per_micro,
                                               per_micro))
    return args.global_batch_size // per_micro


def _precision(precision, device_type, rank, llm):
    """(autocast factory, needs a gradient scaler, the result's fields on
    what ran: precision_ran, amp_dtype, tf32, native_bf16).  The LLMs'
    amp is bfloat16 on every device (no scaler): harness_contract.amp_dtype."""
    autocast, ran, needs_scaler, tf32 = resolve_precision(
        precision, device_type, kind=LLM_KIND if llm else None)
    native_bf16 = None
    if ran == "bfloat16" and device_type == "cpu":
        native_bf16 = cpu_has_native_bf16(os.environ.get(  # a test's file
            "DLRUN_HARNESS_TEST_CPUINFO") or "/proc/cpuinfo")
        if native_bf16 is False and rank == 0:
            sys.stderr.write(
                "dlrun-harness: warning: --precision %s runs bfloat16 on a "
                "CPU without bfloat16 instructions (no avx512_bf16/amx_bf16): "
                "emulated, usually slower than fp32\n" % precision)
    return autocast or NullContext, needs_scaler, {
        "precision_ran": PRECISION_OF_DTYPE[ran], "tf32": tf32, "native_bf16": native_bf16,
        "amp_dtype": ran if autocast is not None else None}


def run_benchmark(args):
    (rank, world_size, rank_source, device_type, device, device_name,
     backend), comm = setup_dist(args)
    task = make_task(args, device_type)
    autocast, needs_scaler, ran = _precision(args.precision, device_type,
                                             rank, task.llm)
    comm.amp_dtype = ran["amp_dtype"]
    accum = accumulation(args, world_size * comm.devices_per_rank)
    if (args.checkpoint_every is None) != (args.checkpoint_dir is None):
        raise HarnessError("--checkpoint-every and --checkpoint-dir go "
                           "together; give both or neither")

    outcome = in_process_group(comm, _train, args, task, comm, device,
                               autocast, needs_scaler, accum)
    if outcome["error"] is not None:
        message, code = outcome["error"]
        if rank == 0:
            error_line(message)
        return code
    result = _result(args, task, comm, outcome, rank_source, device_type,
                     device_name, backend, ran, accum)
    result.update(knob_fields(args, outcome, task.bert or task.llm,
                              device_type))
    if task.llm:
        try:
            result.update(mfu_fields(
                outcome["flops_per_token"], result["value"],
                result["num_devices"], outcome["nodes"], device_type,
                device_name, args.precision, args.matmul_gflops))
        except HarnessError as exc:
            if rank == 0:
                error_line(exc.message)
            return exc.code
    if rank == 0:
        out(RULE)
        out("total %s: %.2f" % (task.unit, result["value"]))
        out(RULE)
        print_result(result)
    return 0


def _result(args, task, comm, outcome, rank_source, device_type, device_name,
            backend, ran, accum):
    """The DLRUN_RESULT record (without MFU)."""
    timing = outcome["timing"]
    batch, world_size = args.batch_size, comm.world_size
    devices = world_size * comm.devices_per_rank
    result = {
        "metric": "throughput", "value": timing["total"], "unit": task.unit,
        "wall_time_reduction": "max_over_ranks",
        "wall_time_excludes": "checkpoints" if args.checkpoint_every else None,
        "per_rank_wall_time_s": timing["per_rank_walls"],
        "wall_time_s": timing["wall"], "world_size": world_size,
        "timed_start_unix": timing["start_unix"],  # rank 0's clock
        "rank_source": rank_source, "num_devices": devices,
        "devices_per_rank": comm.devices_per_rank,
        "model": args.model, "params": outcome["params"],
        "batch_size_per_rank": batch, "batch_size_per_device": batch,
        "grad_accum": accum, "global_batch_size": batch * devices * accum,
        "timed_steps": args.steps, "warmup_steps": args.warmup_steps,
        "precision": args.precision,
        "compiled": outcome["compiled"], "device": device_type,
        "device_name": device_name, "threads": torch.get_num_threads(),
        "mkldnn": mkldnn_available(),
        "backend": backend if world_size > 1 else "none",
        "seed": args.seed, "data_workers": args.data_workers,
        "final_loss": outcome["final_loss"],
        "first_loss": outcome["first_loss"],
        "loss_fell": outcome["final_loss"] < outcome["first_loss"],
        "fused_optimizer": outcome["fused_optimizer"],
        "quality": outcome["quality"],
    }
    result.update(ran)
    result.update(task.result_fields(args, timing, outcome["optimizer"]))
    result.update(outcome["data"])
    result.update(outcome["stall"])
    result.update(outcome["extra"])
    result.update(run_fields(device_type))
    result.update(comm.fields())
    return result


def _header(args, task, comm, devices, optimizer, accum):
    per_device = args.batch_size
    out("PyTorch:     %s" % torch.__version__)
    out("Model:       %s" % args.model)
    out("Dataset:     %s (%s)" % (task.dataset, task.data_label))
    out("Mode:        training")
    out("Batch size:  %d global" % (per_device * len(devices) * accum))
    out("             %d per device" % per_device)
    if accum > 1:
        out("             %d micro-batches per step" % accum)
    if task.bert:
        out("Sequences:   %d tokens, %d per %s, %d layers"
            % (task.seq_length, task.per_instance,
               "example" if task.per_instance > 1 else "instance",
               task.num_layers))
    if task.llm:
        out("Sequences:   %d tokens, %d layers, %d FLOPs per token"
            % (task.seq_length, task.num_layers, task.flops_per_token()))
    out("Num batches: %d" % args.steps)
    out("Devices:     %s" % devices)
    if not (task.bert or task.llm):
        out("Data format: %s" % ("NHWC" if task.channels_last else "NCHW"))
    out("Precision:   %s" % args.precision)
    out("Optimizer:   %s" % optimizer)
    library = ALLOCATOR["library"]
    out("Allocator:   %s%s" % (ALLOCATOR["name"],
                               " (%s)" % library if library else ""))
    out("Variables:   %s" % (getattr(args, "dist", "ddp") if comm.wraps
                               else "replicated"))
    out("==========")
    out("Running warm up")


def _build(args, task, comm, device, needs_scaler, accum):
    """(model to step, the unwrapped model, compiled, optimizer, its name,
    fused, scaler, parameter count)."""
    torch.manual_seed(args.seed)
    model = task.build(args)
    params = count_params(model)
    model = model.to(device)
    if task.channels_last:
        model = model.to(memory_format=torch.channels_last)
    raw_model = model
    if comm.wraps:  # FSDP shards raw_model in place; DDP wraps it
        model = comm.wrap_model(model, device)
    comm.rank_clock = RankClock(device).install(model)  # DDP: a timing hook
    model, compiled = maybe_compile(model, args.compile == "on")
    optimizer, name, fused = task.optimizer(
        raw_model, args, comm.fused_mode(args.fused_optimizer,
                                         task.optimizer_name))
    scaler = make_grad_scaler() if needs_scaler else None
    optimizer, scaler = comm.wrap_optimizer(optimizer, raw_model, scaler,
                                            accum)
    return model, raw_model, compiled, optimizer, name, fused, scaler, params


def make_step(model, optimizer, scaler, criterion, source, autocast, comm,
              accum):
    """One optimizer step over ``accum`` micro-batches: (the step's loss,
    seconds spent waiting for the data source)."""
    def micro(last):
        before = time.perf_counter()
        inputs, targets = source.next()
        waited = time.perf_counter() - before
        context = comm.accumulating(model, last) if accum > 1 else \
            NullContext()
        with context:
            with autocast():
                loss = criterion(model(*inputs), targets)
            if accum > 1:
                loss = loss / accum
            if scaler is not None:
                scaler.scale(loss).backward()
            else:
                loss.backward()
        return loss.detach(), waited

    def step():
        optimizer.zero_grad()
        loss, stall = micro(accum == 1)
        for i in range(1, accum):
            more, waited = micro(i == accum - 1)
            loss, stall = loss + more, stall + waited
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        return loss, stall
    return step


def _train(args, task, comm, device, autocast, needs_scaler, accum):
    """Build, warm up, time and check.  All references to the model and the
    optimizer live in this frame, so they are gone when it returns."""
    window = TimedWindow()  # the node from here on: harness_common
    rank, world_size = comm.rank, comm.world_size
    (model, raw_model, compiled, optimizer, optimizer_name, fused, scaler,
     params) = _build(args, task, comm, device, needs_scaler, accum)
    bn_relu = fuse(raw_model, args, task.channels_last, device.type)
    batch = args.batch_size * comm.devices_per_rank
    source = task.batches(args, batch, rank, world_size, device)
    task.data_label = source.label()
    model.train()
    step = make_step(model, optimizer, scaler, task.criterion(device),
                     source, autocast, comm, accum)
    ckpt = None
    if args.checkpoint_every:
        ckpt = Checkpointer(args.checkpoint_dir, args.checkpoint_every, comm,
                            bool(comm.fields().get("fsdp_sharded")))
    per_step = batch * accum * task.per_instance  # per rank
    loader = measure_loader(source, args.loader_steps, batch, device)
    devices = _devices(comm, device)  # a collective: every rank takes part
    if rank == 0:
        _header(args, task, comm, devices, optimizer_name, accum)
    first_loss = loss = None
    warmup_start, first_step_unix = time.perf_counter(), time.time()  # compiling happens here, untimed
    for _ in range(args.warmup_steps):
        loss, _ = step()
        if first_loss is None:
            first_loss = float(loss)
    sync(device)
    warmup_s = time.perf_counter() - warmup_start
    comm.barrier()
    sync(device)
    if rank == 0:
        out("Done warm up")
        out("Step\t%s\ttotal_loss" % task.step_label)
    run = _timed_steps(args, step, device, comm, task, world_size * per_step,
                       ckpt, raw_model, optimizer, window)
    first_loss = run["first_loss"] if first_loss is None else first_loss
    outcome = {"error": None, "params": params, "compiled": compiled,
               "final_loss": run["final_loss"], "first_loss": first_loss,
               "optimizer": optimizer_name, "fused_optimizer": fused,
               "fused_bn_relu": bn_relu, "data": source.fields(),
               "warmup_s": warmup_s, "channels_last": task.channels_last,
               "extra": ckpt.fields() if ckpt is not None else {},
               "flops_per_token": task.flops_per_token() if task.llm
               else None}
    outcome["extra"].update(loader_fields(comm, loader, task), **first_step_fields(first_step_unix))
    source.close()
    outcome["error"] = _checks(comm, raw_model, run["final_loss"], args.steps)
    if outcome["error"] is None:
        outcome.update(_timing(comm, per_step * args.steps, run))
        outcome["extra"].update(rank_fields(comm, comm.rank_clock, device))
        outcome["quality"] = quality_fields(comm.all_gather(run["window"]))
    # Clean teardown: no rank may destroy the process group while a DDP
    # model is alive anywhere, so meet first, then drop every reference.
    comm.barrier()
    del model, raw_model, optimizer, scaler, step, source, loss
    collect_garbage(comm)
    return outcome


def _devices(comm, device):
    """Every rank's devices, as tf_cnn_benchmarks names them (/gpu:0)."""
    index = device.index if device.type == "cuda" else 0
    kind = "gpu" if device.type == "cuda" else "cpu"
    local = list(range(comm.devices_per_rank)) if comm.devices_per_rank > 1 \
        else [index]
    return ["/%s:%d" % (kind, int(g)) for row in comm.all_gather(
        [float(i) for i in local]) for g in row]


def _timed_steps(args, step, device, comm, task, global_per_step, ckpt,
                 raw_model, optimizer, window):
    """The timed loop: step times (display and checkpoints excluded; on CUDA
    from events, waited for only where a row is printed, so the GPU is never
    serialised; the last step prints a row, the rate over every step), the
    data-stall seconds, the wall time without checkpoints, the losses."""
    stall = paused = 0.0
    loss = first_loss = None
    window.start()
    start_unix = time.time()  # where the timed window lies (telemetry)
    start = time.perf_counter()
    clock = StepClock(device, comm.rank_clock)
    for i in range(args.steps):
        loss, waited = step()
        clock.step_done()
        stall += waited
        n = i + 1
        if n == 1 or n % args.display_every == 0 or n == args.steps:
            step_times = clock.settle()
            value = float(loss)
            first_loss = value if first_loss is None else first_loss
            if comm.rank == 0:
                rate, err, jitter = perf_stats(global_per_step, step_times)
                out("%d\t%s: %.1f +/- %.1f (jitter = %.1f)\t%.3f"
                    % (n, task.unit, rate, err, jitter, value))
            if comm.world_size == 1 and not _finite(value):
                raise HarnessError("loss is not finite (%r) at step %d"
                                   % (value, n), EXIT_NONFINITE)
            clock.restart()
        if ckpt is not None and ckpt.due(n):
            clock.settle()
            before = time.perf_counter()
            ckpt.save(n, raw_model, optimizer)
            paused += time.perf_counter() - before
            clock.restart()
    sync(device)
    wall = time.perf_counter() - start - paused
    return {"wall": wall, "stall": stall, "final_loss": float(loss),
            "first_loss": first_loss, "start_unix": start_unix,
            "window": window.stop(clock.settle(), torch.get_num_threads())}


def _checks(comm, raw_model, final_loss, steps):
    """Collective checks: every rank reaches the same verdict."""
    bad_loss = comm.all_reduce([0.0 if _finite(final_loss) else 1.0],
                               "MAX")[0]
    if bad_loss:
        return ("loss is not finite (rank 0: %r) after %d steps"
                % (final_loss, steps), EXIT_NONFINITE)
    if comm.world_size > 1:
        return comm.check_replicas(raw_model)
    return None


def _timing(comm, per_rank_instances, run):
    wall = run["wall"]
    host = float(zlib.crc32(socket.gethostname().encode("utf-8")))
    gathered = comm.all_gather([per_rank_instances / wall, wall,
                                run["stall"], host])
    max_wall = max(g[1] for g in gathered)
    stalls = [g[2] for g in gathered]
    total = comm.world_size * per_rank_instances / max_wall
    devices = comm.world_size * comm.devices_per_rank
    return {"timing": {"per_rank_rates": [g[0] for g in gathered],
                       "per_rank_walls": [g[1] for g in gathered],
                       "wall": max_wall, "total": total,
                       "num_devices": devices,
                       "start_unix": run["start_unix"]},
            "nodes": len(set(g[3] for g in gathered)),
            "stall": {"data_stall_s": max(stalls),
                      "per_rank_data_stall_s": stalls,
                      "data_stall_fraction": max(
                          g[2] / g[1] for g in gathered),
                      "data_stall_is": "seconds of the timed steps spent "
                                       "waiting for the data source's "
                                       "next batch, the slowest rank's"}}


def _finite(value):
    return not (math.isnan(value) or math.isinf(value))
