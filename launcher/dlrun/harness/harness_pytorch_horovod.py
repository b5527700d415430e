"""dlrun PyTorch harness: the distribution layer chosen with ``--dist`` -
DistributedDataParallel over a torch.distributed process group (``ddp``,
the default) or Horovod (``horovod``); ``fsdp`` and ``dataparallel`` are
in harness_pytorch_fsdp.py.  Horovod is imported only for
``--dist horovod``, so this file imports without it.  Standard library +
torch (+ horovod.torch when asked for); runs on Python >= 3.6 with
PyTorch >= 1.0 and Horovod >= 0.16.

With Horovod the harness follows Horovod's own recipe for PyTorch:
``hvd.init()``; rank, world size and local rank from Horovod; the model's
state broadcast from rank 0 (``hvd.broadcast_parameters``); the optimizer
wrapped in ``hvd.DistributedOptimizer(optimizer, named_parameters=...)``,
which averages every gradient with an all-reduce during the backward pass;
its state broadcast (``hvd.broadcast_optimizer_state``).  The collectives
the harness itself needs (the device list, the timing, the end-of-run
replica check) go through ``hvd.allgather``/``hvd.allreduce``: MAX and MIN,
which Horovod 0.16 lacks, are taken over an allgather of every rank's
values.
"""

import os

import torch

from harness_pytorch_comm import Comm
from harness_common import EXIT_USAGE, HarnessError
from harness_pytorch_process import setup_process

DIST_CHOICES = ("ddp", "horovod", "fsdp", "dataparallel")
# Test hook: with this set to 1, --dist horovod leaves the optimizer
# unwrapped (no gradient averaging), so that tests can prove the replica
# check catches ranks that do not average.  It has no other effect.
NO_WRAP_ENV = "DLRUN_HARNESS_TEST_HOROVOD_NO_WRAP"


def setup_dist(args):
    """(setup_process's tuple, comm) for ``args.dist``: a torch.distributed
    Comm for ddp; for horovod, Horovod is initialised first and says the
    rank and world size."""
    dist = getattr(args, "dist", "ddp")
    if dist != "horovod":
        process = setup_process(args)
        rank, world_size, _, device_type, device, _, backend = process
        if dist == "dataparallel":
            from harness_pytorch_fsdp import (DataParallelComm,
                                              check_dataparallel)
            check_dataparallel(world_size, device_type)
            comm = DataParallelComm(device,
                                    getattr(args, "dataparallel_gpus", None))
            return process[:6] + ("none",), comm
        cls = Comm
        if dist == "fsdp":
            from harness_pytorch_fsdp import FsdpComm as cls
        return process, cls(rank, world_size, backend, device,
                            args.timeout_s)
    if args.backend != "auto":
        raise HarnessError("--backend %s applies to --dist ddp (a "
                           "torch.distributed process group); Horovod picks "
                           "its own; valid with --dist horovod: --backend "
                           "auto" % args.backend)
    hvd = import_horovod()
    hvd.init()
    ranks = (hvd.rank(), hvd.size(), hvd.local_rank(), "horovod")
    (rank, world_size, rank_source, device_type, device, device_name,
     _) = setup_process(args, ranks)
    comm = HorovodComm(hvd, device)
    return ((rank, world_size, rank_source, device_type, device, device_name,
             comm.backend), comm)


def import_horovod():
    try:
        import horovod.torch as hvd
    except ImportError as exc:
        raise HarnessError("--dist horovod: Horovod for PyTorch cannot be "
                           "imported here (%s); valid: an image with "
                           "Horovod, or --dist ddp" % exc, EXIT_USAGE)
    return hvd


def _horovod_version():
    try:
        import horovod
        return str(horovod.__version__)
    except Exception:
        return None


class HorovodComm(Comm):
    """Comm's interface over Horovod: the process is already initialised
    (Horovod gave the rank); ``init`` marks it live for in_process_group and
    ``destroy`` shuts Horovod down.  The replica check and the micro-batch
    context are Comm's (a plain model has no no_sync)."""

    def __init__(self, hvd, device):  # Horovod, not Comm, knows the ranks
        self.hvd = hvd
        self.rank = hvd.rank()
        self.world_size = hvd.size()
        self.device = device
        self.dist = None
        self._count = 0
        self.backend = self._backend(device)

    def _backend(self, device):
        hvd = self.hvd
        nccl_built = getattr(hvd, "nccl_built", None)
        if device.type == "cuda" and nccl_built is not None and nccl_built():
            return "nccl"
        gloo_enabled = getattr(hvd, "gloo_enabled", None)
        if gloo_enabled is not None and gloo_enabled():
            return "gloo"
        return "mpi"  # Horovod before 0.17 has only MPI

    def fields(self):
        return {"dist": "horovod", "horovod_version": _horovod_version()}

    def init(self):
        self.dist = self.hvd

    def _name(self, what):
        self._count += 1
        return "dlrun.%s.%d" % (what, self._count)

    def barrier(self):
        if self.dist is None:
            return
        barrier = getattr(self.hvd, "barrier", None)
        if barrier is not None:
            barrier()
        else:  # Horovod < 0.23: a small all-reduce meets every rank
            self.hvd.allreduce(torch.zeros(1), name=self._name("barrier"))

    def all_gather(self, values):
        """One list of floats per rank, in rank order (hvd.allgather)."""
        if self.dist is None:
            return [list(values)]
        t = torch.tensor([list(values)], dtype=torch.float64)
        rows = self.hvd.allgather(t, name=self._name("allgather"))
        return [[float(v) for v in row] for row in rows.tolist()]

    def all_reduce(self, values, op):
        """Element-wise "MAX", "MIN" or "SUM" of a list of floats: SUM with
        hvd.allreduce, MAX and MIN over hvd.allgather."""
        if self.dist is None:
            return list(values)
        if op == "SUM":
            t = torch.tensor(list(values), dtype=torch.float64)
            name = self._name("allreduce")
            if hasattr(self.hvd, "Sum"):
                t = self.hvd.allreduce(t, op=self.hvd.Sum, name=name)
            else:
                t = self.hvd.allreduce(t, average=False, name=name)
            return [float(v) for v in t.tolist()]
        pick = {"MAX": max, "MIN": min}[op]
        return [pick(column) for column in zip(*self.all_gather(values))]

    def wrap_model(self, model, device):
        return model  # Horovod averages in the optimizer, not in the model

    def wrap_optimizer(self, optimizer, model, scaler=None, accumulate=1):
        """Rank 0's parameters and buffers to every rank, the optimizer
        wrapped to average gradients, its state broadcast; a gradient scaler
        made to average before it unscales."""
        hvd = self.hvd
        contiguous = getattr(torch, "contiguous_format", None)
        if contiguous is not None:
            # Horovod's collectives take contiguous tensors only: the
            # parameters (so their gradients) go back to the default layout;
            # inputs and activations stay channels-last where it is chosen.
            model.to(memory_format=contiguous)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        if os.environ.get(NO_WRAP_ENV) != "1":
            named = [(n, p) for n, p in model.named_parameters()
                     if p.requires_grad]
            extra = {}
            if accumulate > 1:  # average once per step, not per micro-batch
                extra["backward_passes_per_step"] = accumulate
            optimizer = hvd.DistributedOptimizer(optimizer,
                                                 named_parameters=named,
                                                 **extra)
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        if scaler is not None and hasattr(optimizer, "skip_synchronize"):
            scaler = _SynchronizingScaler(scaler)
        return optimizer, scaler

    def destroy(self):
        if self.dist is not None:
            self.dist = None
            self.hvd.shutdown()


class _SynchronizingScaler(object):
    """A GradScaler in front of a Horovod optimizer (Horovod's AMP recipe):
    the gradients are averaged before the scaler unscales and checks them,
    and the optimizer's step does not average them again."""

    def __init__(self, scaler):
        self.scaler = scaler

    def scale(self, loss):
        return self.scaler.scale(loss)

    def step(self, optimizer):
        optimizer.synchronize()
        with optimizer.skip_synchronize():
            return self.scaler.step(optimizer)

    def update(self):
        self.scaler.update()
