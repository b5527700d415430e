"""dlrun PyTorch harness: collective bus-bandwidth benchmarks
(``--benchmark allreduce|broadcast|allgather|reducescatter|alltoall``) over
torch.distributed, with nccl-tests' definitions of size, algbw and busbw.
Standard library + torch; runs on Python >= 3.6 with PyTorch >= 1.0 (a
collective this PyTorch or backend lacks fails with one line).

Sizes as nccl-tests print them: all-reduce and broadcast, the buffer each
rank holds; all-gather and reduce-scatter, the whole (gathered, resp.
scattered) buffer, n x what one rank sends or receives; all-to-all, the
buffer each rank sends (n blocks, one per peer).  The element count printed
is the count the collective is called with (per rank, resp. per peer).
algbw = size / time; busbw = algbw x factor: 2 (n - 1) / n for all-reduce,
(n - 1) / n for all-gather, reduce-scatter and all-to-all, 1 for broadcast.
"""

import os
import time

import torch

from harness_pytorch_comm import Comm, in_process_group, sync
from harness_common import (EXIT_WRONG_RESULT, PERTURB_ENV, RULE,
                            HarnessError, error_line, out, positive,
                            print_result)
from harness_pytorch_process import run_fields, setup_pair_process

#: benchmark -> (nccl-tests name, redop as nccl-tests prints it, root,
#: whether the size is the whole buffer over all ranks, in place).
COLLECTIVES = {
    "allreduce": ("all_reduce", "sum", -1, False, True),
    "broadcast": ("broadcast", "none", 0, False, True),
    "allgather": ("all_gather", "none", -1, True, False),
    "reducescatter": ("reduce_scatter", "sum", -1, True, False),
    "alltoall": ("alltoall", "none", -1, True, False),
}
#: and point-to-point bandwidth (harness_pytorch_sendrecv.py)
BENCHMARKS = tuple(sorted(COLLECTIVES)) + ("sendrecv",)


def add_collective_options(p):
    """--benchmark and the options of the collective sweeps."""
    p.add_argument("--benchmark", choices=("train",) + BENCHMARKS,
                   default="train",
                   help="train (default), or a collective's bus bandwidth "
                        "over message sizes (%s), --steps timed and "
                        "--warmup-steps untimed iterations per size"
                        % ", ".join(BENCHMARKS))
    p.add_argument("--min-bytes", type=positive, default=8,
                   help="collectives: smallest message (default 8)")
    p.add_argument("--max-bytes", type=positive, default=64 * 1024 * 1024,
                   help="collectives: largest message (default 64 MiB)")
    p.add_argument("--size-factor", type=positive, default=2,
                   help="collectives: size multiplier between messages "
                        "(default 2)")
    p.add_argument("--timeout-s", type=positive, default=None,
                   help="collective timeout in seconds (dlrun: the run's "
                        "time limit), so that one stopped rank ends the "
                        "job; default PyTorch's")


def message_sizes(min_bytes, max_bytes, factor=2, granule=1):
    """min_bytes, min_bytes*factor, ... up to max_bytes (as nccl-tests -b -e
    -f), each rounded down to whole blocks of `granule` float32 elements (at
    least one block; a size that rounds onto the one before is dropped)."""
    if min_bytes < 4 or max_bytes < min_bytes or factor < 2:
        raise HarnessError("message sizes: need 4 <= --min-bytes <= "
                           "--max-bytes and --size-factor >= 2, got %d, %d, "
                           "%d" % (min_bytes, max_bytes, factor))
    block = 4 * granule
    sizes = []
    size = min_bytes
    while size <= max_bytes:
        rounded = max(size // block, 1) * block
        if not sizes or rounded != sizes[-1]:
            sizes.append(rounded)
        size *= factor
    return sizes


def busbw_factor(benchmark, world_size):
    """nccl-tests' bus bandwidth factor (doc/PERFORMANCE.md)."""
    n = float(world_size)
    if benchmark == "allreduce":
        return 2.0 * (n - 1) / n
    if benchmark in ("broadcast", "sendrecv"):
        return 1.0
    return (n - 1) / n


def bus_bandwidth(nbytes, seconds, world_size, benchmark="allreduce"):
    """(algbw, busbw) in GB/s: algbw = bytes / time, busbw = algbw x the
    collective's factor, the rate each link carries in a ring."""
    algbw = nbytes / seconds / 1e9
    return algbw, algbw * busbw_factor(benchmark, world_size)


def _each(values, k):
    """Every value k times in a row (repeat_interleave, which PyTorch 1.0
    lacks)."""
    return values.view(-1, 1).expand(values.numel(), k).reshape(-1)


def _first(dist, names):
    for name in names:
        fn = getattr(dist, name, None)
        if fn is not None:
            return name, fn
    return None, None


class Collective(object):
    """One collective on fixed buffers: `run()` is what the timed loop calls;
    `fill(rank)` writes the checked inputs, `wrong()` counts the elements of
    the output that differ from their exact expected values."""

    def __init__(self, benchmark, dist, rank, n, nbytes, device):
        self.benchmark, self.dist, self.rank, self.n = benchmark, dist, rank, n
        whole = COLLECTIVES[benchmark][3]
        elements = nbytes // 4
        self.count = elements // n if whole else elements  # as printed
        self.block = elements // n  # one rank's (or one peer's) share
        zeros = lambda k: torch.zeros(k, dtype=torch.float32,  # noqa: E731
                                      device=device)
        self.api = None
        if benchmark in ("allreduce", "broadcast"):
            self.inp = self.outp = zeros(elements)
            self.api = "all_reduce" if benchmark == "allreduce" else "broadcast"
        elif benchmark == "allgather":
            self.inp, self.outp = zeros(self.block), zeros(elements)
            self.api, fn = _first(dist, ("all_gather_single",
                                         "all_gather_into_tensor",
                                         "_all_gather_base"))
            if fn is None:
                self.api = "all_gather"
                parts = list(self.outp.chunk(n))
                self.call = lambda: dist.all_gather(parts, self.inp)
            else:
                self.call = lambda: fn(self.outp, self.inp)
        elif benchmark == "reducescatter":
            self.inp, self.outp = zeros(elements), zeros(self.block)
            self.api, fn = _first(dist, ("reduce_scatter_single",
                                         "reduce_scatter_tensor",
                                         "_reduce_scatter_base"))
            if fn is None:
                self.api = "reduce_scatter"
                parts = list(self.inp.chunk(n))
                self.call = lambda: dist.reduce_scatter(self.outp, parts)
            else:
                self.call = lambda: fn(self.outp, self.inp)
        else:
            self.inp, self.outp = zeros(elements), zeros(elements)
            self.api, fn = _first(dist, ("all_to_all_single",))
            if fn is None:
                raise HarnessError("--benchmark alltoall needs "
                                   "torch.distributed.all_to_all_single "
                                   "(PyTorch >= 1.6), which PyTorch %s "
                                   "lacks" % torch.__version__)
            self.call = lambda: fn(self.outp, self.inp)
        if benchmark == "allreduce":
            self.call = lambda: dist.all_reduce(self.inp)
        elif benchmark == "broadcast":
            self.call = lambda: dist.broadcast(self.inp, 0)
        # what the timed loop calls: the collective itself, no method in between
        self.run = self.call

    def _index(self, k):
        return torch.arange(k, dtype=torch.float32,
                            device=self.inp.device).remainder_(7.0)

    def fill(self):
        """Deterministic inputs, small integers: every sum is exact."""
        r, n, inp = self.rank, float(self.n), self.inp
        if self.benchmark == "allreduce":
            inp.copy_(self._index(inp.numel()).add_(r + 1.0))
        elif self.benchmark == "broadcast":
            inp.copy_(self._index(inp.numel()).add_(1.0) if r == 0
                      else torch.full_like(inp, -1.0))
        elif self.benchmark == "allgather":
            inp.copy_(self._index(self.block).mul_(n).add_(r))
        elif self.benchmark == "reducescatter":
            inp.copy_(self._index(inp.numel()).add_(r + 1.0))
        else:  # block j goes to rank j: r * n + j, exact below 2**24
            peers = torch.arange(self.n, dtype=torch.float32,
                                 device=inp.device)
            inp.copy_(_each(peers.add_(r * n), self.block))
        if self.outp is not inp:
            self.outp.fill_(-2.0)
        if os.environ.get(PERTURB_ENV) == str(self.rank):
            inp[0] += 1.0  # test hook: a wrong contribution

    def expected(self):
        r, n, k = self.rank, self.n, self.outp.numel()
        if self.benchmark == "allreduce":
            return self._index(k).mul_(n).add_(n * (n + 1) / 2.0)
        if self.benchmark == "broadcast":
            return self._index(k).add_(1.0)
        if self.benchmark == "allgather":
            ranks = torch.arange(n, dtype=torch.float32, device=self.outp.device)
            return (self._index(self.block).mul_(n).repeat(n)
                    + _each(ranks, self.block))
        if self.benchmark == "reducescatter":
            full = self._index(self.block * n).mul_(n).add_(n * (n + 1) / 2.0)
            return full[r * self.block:(r + 1) * self.block]
        peers = torch.arange(n, dtype=torch.float32, device=self.outp.device)
        return _each(peers.mul_(n).add_(r), self.block)

    def wrong(self):
        return int((self.outp != self.expected()).sum().item())


def run_communication(args):
    """--benchmark: a collective's sweep, or sendrecv's pairs."""
    if args.benchmark == "sendrecv":
        from harness_pytorch_sendrecv import run_sendrecv
        return run_sendrecv(args, message_sizes)
    return run_collective(args)


def run_collective(args):
    benchmark = args.benchmark
    (rank, world_size, rank_source, device_type, device, device_name,
     backend) = setup_pair_process(args, benchmark)
    whole = COLLECTIVES[benchmark][3]
    sizes = message_sizes(args.min_bytes, args.max_bytes, args.size_factor,
                          world_size if whole else 1)
    comm = Comm(rank, world_size, backend, device, args.timeout_s)
    rows, api = in_process_group(comm, _sweep, args, comm, device, sizes)
    name = COLLECTIVES[benchmark][0]
    wrong = sum(r["wrong"] for r in rows)
    if wrong:
        bad = [r["bytes"] for r in rows if r["wrong"]]
        if rank == 0:
            error_line("%s returned wrong values: %d elements over all "
                       "ranks, at message sizes %s bytes"
                       % (name.replace("_", "-"), wrong, bad))
        return EXIT_WRONG_RESULT
    avg_busbw = sum(r["busbw_gbs"] for r in rows) / len(rows)
    result = _record(args, api, rows, avg_busbw, world_size, rank_source,
                     device_type, device_name, backend)
    result.update(run_fields(device_type))
    if rank == 0:
        out("# Avg bus bandwidth    : %.4f" % avg_busbw)
        out(RULE)
        print_result(result)
    return 0


def _record(args, api, rows, avg_busbw, world_size, rank_source, device_type,
            device_name, backend):
    """The DLRUN_RESULT record of a sweep (without the versions)."""
    benchmark = args.benchmark
    name, redop, root, whole, in_place = COLLECTIVES[benchmark]
    largest = rows[-1]
    factor = busbw_factor(benchmark, world_size)
    return {
        "benchmark": benchmark,
        "collective": name,
        "api": "torch.distributed." + api,
        "metric": "busbw",
        "value": largest["busbw_gbs"],
        "unit": "GB/s",
        "formula": "busbw = bytes/time * %s at the largest message (bytes "
                   "as nccl-tests count them); time = max over ranks of the "
                   "mean time of one %s"
                   % ({"allreduce": "2*(world_size-1)/world_size",
                       "broadcast": "1"}.get(
                           benchmark, "(world_size-1)/world_size"), name),
        "busbw_factor": factor,
        "size_is": "whole buffer over all ranks" if whole
                   else "buffer of one rank",
        "time_reduction": "max_over_ranks",
        "op": redop if redop != "none" else None,
        "root": root if root >= 0 else None,
        "dtype": "float32",
        "in_place": in_place,
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


def _time(coll, steps, warmup, comm, device):
    """Mean seconds of one collective on this rank: `warmup` untimed calls,
    a barrier, then `steps` back-to-back calls timed as one span (nothing
    else in the loop: no allocation, no synchronisation per call)."""
    run = coll.run
    for _ in range(warmup):
        run()
    sync(device)
    comm.barrier()
    sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        run()
    sync(device)
    return (time.perf_counter() - start) / steps


def _sweep(args, comm, device, sizes):
    """Per message size: time `--steps` collectives on zero buffers (nothing
    grows, the values cannot change the speed), then one collective on
    deterministic inputs, every output element checked against its exact
    value."""
    dist, rank, n = comm.dist, comm.rank, comm.world_size
    name, redop, root, _, in_place = COLLECTIVES[args.benchmark]
    if rank == 0:
        out("PyTorch:     %s" % torch.__version__)
        out("Benchmark:   %s (float32, %s), %d ranks, backend %s"
            % (name.replace("_", "-"), "in place" if in_place
               else "out of place", n, comm.backend))
        out("Iterations:  %d timed, %d warm-up per size"
            % (args.steps, args.warmup_steps))
        out("#%12s %14s %8s %6s %6s %12s %8s %8s %8s"
            % ("size", "count", "type", "redop", "root", "time", "algbw",
               "busbw", "#wrong"))
        out("#%12s %14s %8s %6s %6s %12s %8s %8s %8s"
            % ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)",
               ""))
    rows = []
    api = None
    for nbytes in sizes:
        coll = Collective(args.benchmark, dist, rank, n, nbytes, device)
        api = coll.api
        try:
            local = _time(coll, args.steps, args.warmup_steps, comm, device)
        except RuntimeError as exc:
            raise HarnessError("backend %s of PyTorch %s could not run %s "
                               "(torch.distributed.%s): %s"
                               % (comm.backend, torch.__version__, name,
                                  coll.api, str(exc).splitlines()[0]))
        coll.fill()
        coll.run()
        sync(device)
        local_wrong = coll.wrong()
        del coll
        seconds = comm.all_reduce([local], "MAX")[0]
        wrong = int(comm.all_reduce([float(local_wrong)], "SUM")[0])
        algbw, busbw = bus_bandwidth(nbytes, seconds, n, args.benchmark)
        count = nbytes // 4 // (n if COLLECTIVES[args.benchmark][3] else 1)
        rows.append({"bytes": nbytes, "count": count,
                     "time_us": seconds * 1e6, "algbw_gbs": algbw,
                     "busbw_gbs": busbw, "wrong": wrong})
        if rank == 0:
            out(" %12d %14d %8s %6s %6d %12.2f %8.3f %8.3f %8d"
                % (nbytes, count, "float", redop, root, seconds * 1e6,
                   algbw, busbw, wrong))
    comm.barrier()
    return rows, api
