"""dlrun PyTorch harness: per-rank step timing.  In data-parallel training
every rank's step takes as long as the slowest rank's, because the gradient
all-reduce waits for it; so each rank records, per timed step, the time
until it was ready to communicate (its step's last gradient bucket ready)
and the time it then waited (until that bucket's all-reduce was done).

Under DistributedDataParallel both are seen by a communication hook: it
runs the default all-reduce (the same averaged gradients) and marks when a
bucket was handed to it and when its all-reduce completed (on CUDA as
events in the stream order, read after the timed loop's final
synchronisation, so the GPU is never waited for in the loop).  Without a
hook (Horovod, FSDP, DataParallel, PyTorch < 1.10) only the step times are
recorded.  Nothing is communicated per step: after the timed loop the ranks
gather once each rank's median (p50) and 95th percentile, its host and its
device, and rank 0 names the rank the others waited for and its ratio to
the median of the others.  Standard library + torch; Python >= 3.6.
"""

import os
import platform
import time

import torch

from harness_common import pack_text, unpack_text

#: How the per-rank times are measured (the result's rank_timing_is).
TIMING_IS = ("per timed step and rank: step = the step's time on that rank; "
             "ready = from the step's start until its last gradient bucket "
             "was ready for the all-reduce (a DDP communication hook); wait "
             "= from then until that all-reduce was done; p50/p95 over the "
             "timed steps; the slowest rank: the longest median ready time "
             "(the longest median step where no hook ran), its ratio over "
             "the median of the other ranks'")
_STATS = 6  # step p50, p95, ready p50, p95, wait p50, p95
_TEXT = 11  # floats per packed text (harness_common.HOST_FLOATS)
_MISSING = -1.0


def _hookable():
    """Whether this PyTorch has what the hook needs (GradBucket.buffer and
    futures on every backend: 1.10 and later)."""
    dist = getattr(torch, "distributed", None)
    bucket = getattr(dist, "GradBucket", None)
    return bucket is not None and hasattr(bucket, "buffer")


class RankClock(object):
    """One rank's marks per timed step: (start, ready, done, end), floats
    from time.perf_counter() on the CPU, CUDA events on a GPU; ready and
    done are None where no hook ran in the step."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"
        self.rows = []
        self.hooked = False
        self.ready = self.done = self.start = None

    def mark(self):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def install(self, model):
        """Register the timing hook where ``model`` is a
        DistributedDataParallel model (not FSDP's, whose hooks see no
        buckets); this clock."""
        ddp = getattr(torch.nn.parallel, "DistributedDataParallel", None)
        if ddp is not None and isinstance(model, ddp) and _hookable():
            model.register_comm_hook(None, self.hook)
            self.hooked = True
        return self

    def hook(self, state, bucket):
        """DDP's default all-reduce (torch's allreduce_hook: divide by the
        world size, sum), with the bucket's ready and done marks."""
        import torch.distributed as dist
        group = state if state is not None else dist.group.WORLD
        self.ready = self.mark()
        tensor = bucket.buffer()
        tensor.div_(group.size())
        future = dist.all_reduce(tensor, group=group,
                                 async_op=True).get_future()
        return future.then(self._done)

    def _done(self, future):
        self.done = self.mark()
        return future.value()[0]

    def restart(self):
        """The next step starts now."""
        self.start = self.mark()
        self.ready = self.done = None

    def step_done(self):
        end = self.mark()
        self.rows.append((self.start, self.ready, self.done, end))
        self.start, self.ready, self.done = end, None, None

    def times(self):
        """(step, ready, wait) lists in seconds; call after the loop's final
        synchronisation (every event has completed)."""
        steps, ready, wait = [], [], []
        for start, bucket, done, end in self.rows:
            steps.append(self._seconds(start, end))
            if bucket is not None and done is not None:
                ready.append(self._seconds(start, bucket))
                wait.append(self._seconds(bucket, done))
        return steps, ready, wait

    def _seconds(self, a, b):
        if self.cuda:
            return a.elapsed_time(b) / 1000.0
        return b - a


def percentile(values, q):
    """The q-th percentile (0-100) of values, linear between ranks; None for
    none."""
    v = sorted(values)
    if not v:
        return None
    at = (len(v) - 1) * q / 100.0
    low = int(at)
    high = min(low + 1, len(v) - 1)
    return v[low] + (v[high] - v[low]) * (at - low)


def device_label(device):
    """This rank's device as the result names it: the GPU (index and
    model), or the CPUs this process may run on."""
    if device.type == "cuda":
        index = device.index if device.index is not None else \
            torch.cuda.current_device()
        return "cuda:%d %s" % (index, torch.cuda.get_device_name(index))
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(
        os, "sched_getaffinity") else []
    return "cpu, CPUs %s" % (cpu_ranges(cpus) or "unknown")


def cpu_ranges(cpus):
    """0,1,2,3,8 as "0-3,8" (a label within the packed text's 66 bytes)."""
    spans = []
    for cpu in cpus:
        if spans and cpu == spans[-1][1] + 1:
            spans[-1][1] = cpu
        else:
            spans.append([cpu, cpu])
    return ",".join("%d" % a if a == b else "%d-%d" % (a, b)
                    for a, b in spans)


def _row(clock, device):
    steps, ready, wait = clock.times()
    stats = []
    for values in (steps, ready, wait):
        for q in (50, 95):
            value = percentile(values, q)
            stats.append(_MISSING if value is None else value)
    return stats + pack_text(platform.node(), _TEXT) + \
        pack_text(device_label(device), _TEXT)


def _median(values):
    return percentile(values, 50)


def _slowest(p50, hosts, devices, figure):
    """The rank the others waited for and its ratio over the median of the
    other ranks' (None for one rank or an unmeasured figure)."""
    if len(p50) < 2 or any(v is None for v in p50):
        return None
    rank = max(range(len(p50)), key=lambda r: p50[r])
    others = _median([v for r, v in enumerate(p50) if r != rank])
    if not others or others <= 0:
        return None
    return {"rank": rank, "host": hosts[rank], "device": devices[rank],
            "ratio": round(p50[rank] / others, 3), "figure": figure,
            "p50_s": p50[rank], "others_median_s": others}


def rank_fields(comm, clock, device):
    """The result's per-rank fields; a collective (every rank calls it once,
    after the timed loop)."""
    rows = comm.all_gather(_row(clock, device))

    def column(i):
        return [None if r[i] == _MISSING else r[i] for r in rows]
    hosts = [unpack_text(r[_STATS:_STATS + _TEXT]) for r in rows]
    devices = [unpack_text(r[_STATS + _TEXT:]) for r in rows]
    hooked = all(v is not None for v in column(2))
    figure = "ready" if hooked else "step"
    p50 = column(2) if hooked else column(0)
    spread = None
    if all(v is not None and v > 0 for v in p50):
        spread = round(max(p50) / min(p50), 3)
    return {
        "per_rank_step_p50_s": column(0), "per_rank_step_p95_s": column(1),
        "per_rank_ready_p50_s": column(2) if hooked else None,
        "per_rank_ready_p95_s": column(3) if hooked else None,
        "per_rank_wait_p50_s": column(4) if hooked else None,
        "per_rank_wait_p95_s": column(5) if hooked else None,
        "per_rank_host": hosts, "per_rank_device": devices,
        "rank_spread": spread, "rank_timing_is": TIMING_IS,
        "slowest_rank": _slowest(p50, hosts, devices, figure),
    }
