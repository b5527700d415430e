"""dlrun PyTorch harness: communication - the process group's set-up and
teardown, the few collectives the harness needs and DistributedDataParallel
(the collective benchmarks are in harness_pytorch_collectives.py).
Standard library + torch; runs on Python >= 3.6 with PyTorch >= 1.0.
"""

import datetime
import gc
import os
import sys
import time
import traceback

import torch

from harness_common import (EXIT_DIVERGED, EXIT_UNEXPECTED, PERTURB_ENV,
                            REPLICA_RTOL, HarnessError, NullContext,
                            error_line)


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

    # --dist ddp; harness_pytorch_horovod.HorovodComm and the classes of
    # harness_pytorch_fsdp.py have the same methods.
    #: devices one process drives (DataParallel: all of the node's GPUs)
    devices_per_rank = 1
    #: bfloat16 where the run autocasts to it (FSDP computes in it)
    amp_dtype = None

    @property
    def wraps(self):
        """Whether the model needs this layer's wrapper."""
        return self.world_size > 1

    def fields(self):
        return {"dist": "ddp", "horovod_version": None}

    def wrap_model(self, model, device):
        return wrap_ddp(model, device)

    def wrap_optimizer(self, optimizer, model, scaler=None, accumulate=1):
        return optimizer, scaler  # DDP averages in the model's backward

    def fused_mode(self, mode, optimizer):
        """--fused-optimizer as this layer can step it."""
        return mode

    def accumulating(self, model, last):
        """The context of one micro-batch's backward: DDP skips its
        all-reduce (no_sync) on all but the last of a step's micro-batches;
        without no_sync (PyTorch < 1.2) every backward averages, which
        costs more and gives the same gradients."""
        no_sync = getattr(model, "no_sync", None)
        if last or no_sync is None or self.world_size == 1:
            return NullContext()
        return no_sync()

    def check_replicas(self, module):
        """None, or (message, exit code) when the replicas' parameters
        differ: a float64 checksum compared across ranks (MAX and MIN)."""
        maybe_perturb(module, self.rank)
        checksum = param_checksum(module)
        cmax = self.all_reduce(checksum, "MAX")
        cmin = self.all_reduce(checksum, "MIN")
        if replicas_agree(cmax, cmin):
            return None
        return ("replicas diverged: parameter checksums (sum, abs sum) "
                "differ across %d ranks: max %r, min %r (relative tolerance "
                "%g)" % (self.world_size, cmax, cmin, REPLICA_RTOL),
                EXIT_DIVERGED)


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


def perturbs(rank):
    """Whether the documented test hook asks this rank to perturb."""
    value = os.environ.get(PERTURB_ENV)
    return value is not None and value.strip() == str(rank)


def maybe_perturb(module, rank):
    """The documented test hook (see harness_pytorch.py's notes)."""
    if not perturbs(rank):
        return
    with torch.no_grad():
        for p in module.parameters():
            p.add_(1.0)
            break


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


class StepClock(object):
    """The timed loop's per-step times without serialising the GPU.  On CUDA
    an event is recorded after every step and the host waits for them only
    where a row is printed (``settle``) and at the end, so the next step's
    kernels queue behind this one's as they do in any training loop; on the
    CPU every step is timed as it returns, as always."""

    def __init__(self, device, ranks=None):
        self.cuda = device.type == "cuda"
        self.times = []
        self.pending = []
        self.ranks = ranks  # harness_pytorch_ranktime.RankClock (per rank)
        self.restart()

    def restart(self):
        """Start the next step's time now (after a printed row)."""
        if self.ranks is not None:
            self.ranks.restart()
        if self.cuda:
            self.last = torch.cuda.Event(enable_timing=True)
            self.last.record()
        else:
            self.last = time.perf_counter()

    def step_done(self):
        if self.ranks is not None:
            self.ranks.step_done()
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.pending.append(event)
        else:
            now = time.perf_counter()
            self.times.append(now - self.last)
            self.last = now

    def settle(self):
        """Wait for the steps recorded so far; every step's time (s)."""
        if self.pending:
            self.pending[-1].synchronize()
            for event in self.pending:
                self.times.append(self.last.elapsed_time(event) / 1000.0)
                self.last = event
            self.pending = []
        return self.times


def in_process_group(comm, work, *args):
    """work(*args) inside the process group, which is torn down after it.
    On an exception with a live group: report and leave at once - never let
    interpreter shutdown run a process group's destructors (with a live DDP
    model they hang or abort)."""
    comm.init()
    if comm.dist is not None:
        _HAD_GROUP.append(comm)
    try:
        outcome = work(*args)
    except BaseException:
        if comm.dist is not None:
            _leave_now(sys.exc_info())
        raise
    # work has returned: what it built (model, optimizer, buffers) is
    # unreferenced now.
    collect_garbage(comm)
    comm.destroy()
    return outcome


def collect_garbage(comm):
    """gc.collect() where a process group (or Horovod) is live: its
    teardown must find no model alive on any rank.  One process has none,
    and a full collection over torch's imported modules costs 0.3-0.5 s of
    its end (two of them did, in every one-rank run)."""
    if comm.dist is not None:
        gc.collect()


#: the communication layers this process has had live (see leave)
_HAD_GROUP = []


def leave(code):
    """End the process with exit status `code`.  One that has had a process
    group (or Horovod) live leaves without the interpreter's teardown once
    its output is flushed: the group is destroyed, its result printed, and
    what remains are the C++ runtime's static destructors, one of which
    aborted a rank after a run that had succeeded (seen once, torch 2.13,
    gloo: "terminate called without an active exception", SIGABRT)."""
    code = code if isinstance(code, int) else EXIT_UNEXPECTED if code else 0
    if not _HAD_GROUP:
        sys.exit(code)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


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
    leave(code)  # the group is live: leave skips the teardown
