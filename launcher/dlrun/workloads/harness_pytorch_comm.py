"""dlrun PyTorch harness: communication - the process group's set-up and
teardown, the few collectives the harness needs, DistributedDataParallel,
and the all-reduce bus-bandwidth benchmark (``--benchmark allreduce``).
Standard library + torch; runs on Python >= 3.6 with PyTorch >= 1.0.
"""

import datetime
import gc
import json
import os
import sys
import time
import traceback

import torch

from harness_pytorch_common import (EXIT_UNEXPECTED, EXIT_WRONG_RESULT,
                                    PERTURB_ENV, RULE, HarnessError,
                                    error_line, out)
from harness_pytorch_process import run_fields, setup_process


# --- Process group -----------------------------------------------------------

def _dist():
    import torch.distributed as dist
    is_available = getattr(dist, "is_available", None)
    if is_available is not None and not is_available():
        raise HarnessError("this PyTorch was built without torch.distributed")
    return dist


def _reduce_op(dist, name):
    ops = getattr(dist, "ReduceOp", None) or getattr(dist, "reduce_op")
    return getattr(ops, name)


class Comm(object):
    """The few collectives the harness needs; no-ops for one process."""

    def __init__(self, rank, world_size, backend, device, timeout_s=None):
        self.timeout_s = timeout_s
        self.rank = rank
        self.world_size = world_size
        self.backend = backend
        self.dist = None
        # nccl communicates CUDA tensors only
        self.device = device if backend == "nccl" else torch.device("cpu")

    def init(self):
        if self.world_size == 1:
            return
        dist = _dist()
        check = getattr(dist, "is_%s_available" % self.backend, None)
        if check is not None and not check():
            raise HarnessError("backend %s is not available in this PyTorch"
                               % self.backend)
        if self.backend == "mpi":
            dist.init_process_group("mpi")
        else:
            addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
            port = os.environ.get("MASTER_PORT", "29500")
            extra = {}
            if self.timeout_s:
                extra["timeout"] = datetime.timedelta(seconds=self.timeout_s)
            dist.init_process_group(
                self.backend, init_method="tcp://%s:%s" % (addr, port),
                rank=self.rank, world_size=self.world_size, **extra)
        self.dist = dist

    def barrier(self):
        if self.dist is not None:
            self.dist.barrier()

    def all_reduce(self, values, op):
        """Element-wise reduction ("MAX", "MIN", "SUM") of a list of floats."""
        if self.dist is None:
            return list(values)
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        self.dist.all_reduce(t, op=_reduce_op(self.dist, op))
        return [float(v) for v in t.cpu().tolist()]

    def all_gather(self, values):
        """One list of floats per rank, in rank order."""
        if self.dist is None:
            return [list(values)]
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        parts = [torch.zeros_like(t) for _ in range(self.world_size)]
        self.dist.all_gather(parts, t)
        return [[float(v) for v in part.cpu().tolist()] for part in parts]

    def destroy(self):
        if self.dist is not None:
            self.dist.destroy_process_group()
            self.dist = None

    # --dist ddp; harness_pytorch_horovod.HorovodComm has the same three.
    def fields(self):
        return {"dist": "ddp", "horovod_version": None}

    def wrap_model(self, model, device):
        return wrap_ddp(model, device)

    def wrap_optimizer(self, optimizer, model, scaler=None):
        return optimizer, scaler  # DDP averages in the model's backward


def wrap_ddp(model, device):
    ddp = torch.nn.parallel.DistributedDataParallel
    if device.type == "cuda":
        return ddp(model, device_ids=[device.index],
                   output_device=device.index)
    try:
        return ddp(model)
    except Exception:
        # The oldest PyTorch releases have a separate CPU wrapper.
        legacy = getattr(torch.nn.parallel, "DistributedDataParallelCPU",
                         None)
        if legacy is None:
            raise
        return legacy(model)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def in_process_group(comm, work, *args):
    """work(*args) inside the process group, which is torn down after it.
    On an exception with a live group: report and leave at once - never let
    interpreter shutdown run a process group's destructors (with a live DDP
    model they hang or abort)."""
    comm.init()
    try:
        outcome = work(*args)
    except BaseException:
        if comm.dist is not None:
            _leave_now(sys.exc_info())
        raise
    # work has returned: what it built (model, optimizer, buffers) is
    # unreferenced now.
    gc.collect()
    comm.destroy()
    return outcome


def _leave_now(exc_info):
    exc = exc_info[1]
    if isinstance(exc, HarnessError):
        error_line(exc.message)
        code = exc.code
    elif isinstance(exc, SystemExit):
        code = exc.code if isinstance(exc.code, int) else EXIT_UNEXPECTED
    else:
        traceback.print_exception(*exc_info)
        error_line("%s: %s" % (type(exc).__name__, exc))
        code = EXIT_UNEXPECTED
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


# --- All-reduce bus bandwidth ------------------------------------------------

def message_sizes(min_bytes, max_bytes, factor=2):
    """min_bytes, min_bytes*factor, ... up to max_bytes (as nccl-tests -b -e
    -f), each rounded down to whole float32 elements (at least one)."""
    if min_bytes < 4 or max_bytes < min_bytes or factor < 2:
        raise HarnessError("message sizes: need 4 <= --min-bytes <= "
                           "--max-bytes and --size-factor >= 2, got %d, %d, "
                           "%d" % (min_bytes, max_bytes, factor))
    sizes = []
    size = min_bytes
    while size <= max_bytes:
        sizes.append(size // 4 * 4)
        size *= factor
    return sizes


def bus_bandwidth(nbytes, seconds, world_size):
    """(algbw, busbw) in GB/s, nccl-tests' definitions for all-reduce:
    algbw = bytes / time; busbw = algbw * 2 (n - 1) / n, the rate each link
    carries in a ring, comparable across rank counts and with the hardware."""
    algbw = nbytes / seconds / 1e9
    return algbw, algbw * 2.0 * (world_size - 1) / world_size


def run_allreduce(args):
    (rank, world_size, rank_source, device_type, device, device_name,
     backend) = setup_process(args)
    if world_size < 2:
        raise HarnessError(
            "--benchmark allreduce needs at least 2 ranks, found 1; start "
            "it with 2 or more processes (e.g. mpirun -np 2, torchrun "
            "--nproc-per-node 2)")
    sizes = message_sizes(args.min_bytes, args.max_bytes, args.size_factor)
    comm = Comm(rank, world_size, backend, device, args.timeout_s)
    rows = in_process_group(comm, _allreduce_sweep, args, comm, device,
                            sizes)
    wrong = sum(r["wrong"] for r in rows)
    if wrong:
        bad = [r["bytes"] for r in rows if r["wrong"]]
        if rank == 0:
            error_line("all-reduce returned wrong values: %d elements over "
                       "all ranks, at message sizes %s bytes"
                       % (wrong, bad))
        return EXIT_WRONG_RESULT
    largest = rows[-1]
    avg_busbw = sum(r["busbw_gbs"] for r in rows) / len(rows)
    result = {
        "benchmark": "allreduce",
        "metric": "busbw",
        "value": largest["busbw_gbs"],
        "unit": "GB/s",
        "formula": "busbw = bytes/time * 2*(world_size-1)/world_size at the "
                   "largest message; time = max over ranks of the mean time "
                   "of one all-reduce",
        "time_reduction": "max_over_ranks",
        "op": "sum",
        "dtype": "float32",
        "in_place": True,
        "largest_bytes": largest["bytes"],
        "avg_busbw": avg_busbw,
        "sizes": rows,
        "iterations": args.steps,
        "warmup_iterations": args.warmup_steps,
        "world_size": world_size,
        "num_devices": world_size,
        "rank_source": rank_source,
        "device": device_type,
        "device_name": device_name,
        "backend": backend,
        "threads": torch.get_num_threads(),
    }
    result.update(run_fields(device_type))
    if rank == 0:
        out("# Avg bus bandwidth    : %.4f" % avg_busbw)
        out(RULE)
        out("DLRUN_RESULT " + json.dumps(result, sort_keys=True))
    return 0


def _allreduce_sweep(args, comm, device, sizes):
    """Time `--steps` in-place float32 sum all-reduces per message size after
    `--warmup-steps` untimed ones, then check one all-reduce of known values
    (rank r contributes r + 1 everywhere; every element must be
    n (n + 1) / 2).  Timed buffers hold zeros, so repeated reduction never
    overflows and the values cannot change the speed."""
    dist, rank, world_size = comm.dist, comm.rank, comm.world_size
    expected = world_size * (world_size + 1) / 2.0
    if rank == 0:
        out("PyTorch:     %s" % torch.__version__)
        out("Benchmark:   all-reduce (sum, float32, in place), %d ranks, "
            "backend %s" % (world_size, comm.backend))
        out("Iterations:  %d timed, %d warm-up per size"
            % (args.steps, args.warmup_steps))
        out("#%12s %14s %8s %6s %12s %8s %8s %8s"
            % ("size", "count", "type", "redop", "time", "algbw", "busbw",
               "#wrong"))
        out("#%12s %14s %8s %6s %12s %8s %8s %8s"
            % ("(B)", "(elements)", "", "", "(us)", "(GB/s)", "(GB/s)", ""))
    rows = []
    for nbytes in sizes:
        count = max(nbytes // 4, 1)
        buf = torch.zeros(count, dtype=torch.float32, device=device)
        for _ in range(args.warmup_steps):
            dist.all_reduce(buf)
        sync(device)
        comm.barrier()
        sync(device)
        start = time.perf_counter()
        for _ in range(args.steps):
            dist.all_reduce(buf)
        sync(device)
        local = (time.perf_counter() - start) / args.steps
        buf.fill_(rank + 1.0)
        if os.environ.get(PERTURB_ENV) == str(rank):
            buf[0] += 1.0  # test hook: a wrong contribution
        dist.all_reduce(buf)
        local_wrong = int((buf != expected).sum().item())
        del buf
        seconds = comm.all_reduce([local], "MAX")[0]
        wrong = int(comm.all_reduce([float(local_wrong)], "SUM")[0])
        algbw, busbw = bus_bandwidth(count * 4, seconds, world_size)
        rows.append({"bytes": count * 4, "count": count,
                     "time_us": seconds * 1e6, "algbw_gbs": algbw,
                     "busbw_gbs": busbw, "wrong": wrong})
        if rank == 0:
            out(" %12d %14d %8s %6s %12.2f %8.3f %8.3f %8d"
                % (count * 4, count, "float", "sum", seconds * 1e6, algbw,
                   busbw, wrong))
    comm.barrier()
    return rows
