"""dlrun PyTorch harness: point-to-point bandwidth (``--benchmark
sendrecv``) between every pair of ranks, in both directions, over the
process group (gloo on CPUs, NCCL on GPUs: NVLink, PCIe or the fabric,
whichever NCCL takes between the two devices), as Han et al.'s Table III
measured GPU pairs.  Standard library + torch; runs on Python >= 3.6 with
PyTorch >= 1.0.

For each ordered pair (source, destination) and each message size (float32
buffers, --min-bytes to --max-bytes x --size-factor): --warmup-steps
untimed and --steps timed ``send``/``recv`` of the buffer, back to back,
while the other ranks wait at a barrier; then one checked transfer (the
source sends index mod 7 + source + 1, every received element is
compared).  Time per transfer = the slower of the two ranks' mean; GB/s =
bytes / time / 1e9, which is nccl-tests' sendrecv algbw and busbw (factor
1).  Pairs run one after another, so no two transfers share a link.

Result: metric "busbw", value = the slowest pair's GB/s at the largest
message (``value_is`` says so), min/mean/max over pairs at that size,
avg_busbw (that pair's average over the sizes),
and every pair's every size in "pairs" (src, dst, sizes: bytes, time_us,
gbs, wrong).  A wrong element fails the run (exit 6); the test hook
(DLRUN_HARNESS_TEST_PERTURB_RANK=R) makes rank R send one wrong value in
each checked transfer it sources.
"""

import time

import torch

from harness_common import (EXIT_WRONG_RESULT, RULE, HarnessError,
                            error_line, out, print_result)
from harness_pytorch_comm import Comm, in_process_group, perturbs, sync
from harness_pytorch_process import run_fields, setup_pair_process


def _buffer(nbytes, device):
    return torch.zeros(nbytes // 4, dtype=torch.float32, device=device)


def _time_pair(dist, comm, rank, src, dst, buf, steps, warmup, device):
    """The mean seconds of one transfer on this rank (0 if not in the
    pair), after a barrier that starts the pair's transfers together."""
    comm.barrier()
    if rank not in (src, dst):
        return 0.0
    move = ((lambda: dist.send(buf, dst)) if rank == src
            else (lambda: dist.recv(buf, src)))
    for _ in range(warmup):
        move()
    sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        move()
    sync(device)
    return (time.perf_counter() - start) / steps


def _check_pair(dist, rank, src, dst, buf, device):
    """Wrong elements of one transfer of known values (on the receiver)."""
    if rank == src:
        values = torch.arange(buf.numel(), dtype=torch.float32,
                              device=device).remainder_(7.0).add_(src + 1)
        buf.copy_(values)
        if perturbs(rank):
            buf[0] += 1.0  # the test hook: a wrong value on the wire
        dist.send(buf, dst)
    elif rank == dst:
        buf.fill_(-1.0)
        dist.recv(buf, src)
        expected = torch.arange(buf.numel(), dtype=torch.float32,
                                device=device).remainder_(7.0).add_(src + 1)
        return int((buf != expected).sum().item())
    return 0


def _sweep(args, comm, device, sizes):
    dist, rank, n = comm.dist, comm.rank, comm.world_size
    if rank == 0:
        out("PyTorch:     %s" % torch.__version__)
        out("Benchmark:   sendrecv (float32), every pair of %d ranks in "
            "both directions, backend %s" % (n, comm.backend))
        out("Iterations:  %d timed, %d warm-up per pair and size"
            % (args.steps, args.warmup_steps))
        out("#%5s %5s %12s %12s %8s %8s" % ("src", "dst", "size", "time",
                                            "GB/s", "#wrong"))
        out("#%5s %5s %12s %12s %8s %8s" % ("", "", "(B)", "(us)", "", ""))
    pairs = []
    for src in range(n):
        for dst in range(n):
            if src == dst:
                continue
            rows = []
            for nbytes in sizes:
                buf = _buffer(nbytes, device)
                try:
                    local = _time_pair(dist, comm, rank, src, dst, buf,
                                       args.steps, args.warmup_steps, device)
                except RuntimeError as exc:
                    raise HarnessError("backend %s of PyTorch %s could not "
                                       "send/recv: %s" % (
                                           comm.backend, torch.__version__,
                                           str(exc).splitlines()[0]))
                wrong = _check_pair(dist, rank, src, dst, buf, device)
                seconds = comm.all_reduce([local], "MAX")[0]
                wrong = int(comm.all_reduce([float(wrong)], "SUM")[0])
                gbs = nbytes / seconds / 1e9
                rows.append({"bytes": nbytes, "time_us": seconds * 1e6,
                             "gbs": gbs, "wrong": wrong})
                if rank == 0:
                    out(" %5d %5d %12d %12.2f %8.3f %8d"
                        % (src, dst, nbytes, seconds * 1e6, gbs, wrong))
            pairs.append({"src": src, "dst": dst, "sizes": rows})
    comm.barrier()
    return pairs


def run_sendrecv(args, message_sizes):
    (rank, world_size, rank_source, device_type, device, device_name,
     backend) = setup_pair_process(args, "sendrecv")
    sizes = message_sizes(args.min_bytes, args.max_bytes, args.size_factor)
    comm = Comm(rank, world_size, backend, device, args.timeout_s)
    pairs = in_process_group(comm, _sweep, args, comm, device, sizes)
    bad = [(p["src"], p["dst"], r["bytes"]) for p in pairs
           for r in p["sizes"] if r["wrong"]]
    if bad:
        if rank == 0:
            error_line("sendrecv delivered wrong values: (source, "
                       "destination, bytes) %s" % bad[:10])
        return EXIT_WRONG_RESULT
    largest = [p["sizes"][-1]["gbs"] for p in pairs]
    slowest = min(pairs, key=lambda p: p["sizes"][-1]["gbs"])
    result = {
        "benchmark": "sendrecv", "collective": "sendrecv",
        "api": "torch.distributed.send/recv", "metric": "busbw",
        "value": min(largest), "unit": "GB/s",
        "value_is": "the slowest pair's bandwidth at the largest message "
                    "(rank %d to rank %d)" % (slowest["src"], slowest["dst"]),
        "formula": "bytes/time per transfer (nccl-tests sendrecv: busbw = "
                   "algbw); time = the slower of the pair's two ranks",
        "busbw_factor": 1.0, "size_is": "buffer one rank sends",
        "time_reduction": "max_over_the_pair", "dtype": "float32",
        "largest_bytes": sizes[-1], "min_pair_gbs": min(largest),
        "avg_busbw": sum(r["gbs"] for r in slowest["sizes"])
        / len(slowest["sizes"]),
        "avg_busbw_is": "the slowest pair's GB/s averaged over the sizes",
        "mean_pair_gbs": sum(largest) / len(largest),
        "max_pair_gbs": max(largest), "pair_count": len(pairs),
        "pairs": pairs, "iterations": args.steps,
        "warmup_iterations": args.warmup_steps, "world_size": world_size,
        "num_devices": world_size, "rank_source": rank_source,
        "device": device_type, "device_name": device_name,
        "backend": backend, "threads": torch.get_num_threads(),
    }
    result.update(run_fields(device_type))
    if rank == 0:
        out("# Slowest pair at %d bytes: %.4f GB/s (rank %d to %d)"
            % (sizes[-1], min(largest), slowest["src"], slowest["dst"]))
        out("# Avg bus bandwidth    : %.4f" % result["avg_busbw"])
        out(RULE)
        print_result(result)
    return 0
