"""dlrun PyTorch harness: the distribution layers beside DDP and Horovod -
``--dist fsdp`` (FSDP2: ``fully_shard`` over the process group, gloo on
CPUs, NCCL on GPUs) and ``--dist dataparallel`` (one process,
``torch.nn.DataParallel`` over all of the node's GPUs, as Ren et al.'s
Fig. 9 compares it with DistributedDataParallel).  Standard library +
torch; importable on Python >= 3.6 with PyTorch >= 1.0, and each layer
refuses in one line where this PyTorch or node cannot run it.

FSDP2: every unit the model names (``shard_units()``: the LLM's decoder
layers) is sharded with its own ``fully_shard``, then the root (the
embeddings, the final norm, the output layer, or a whole CNN); parameters
become DTensors sharded over the ranks on dimension 0.  With
``--precision amp`` the parameters are gathered and computed in bfloat16
and gradients reduced in float32 (MixedPrecisionPolicy).  Gradient
accumulation turns the reduce-scatter off for all but a step's last
micro-batch (``set_requires_gradient_sync``).  At world size 1 there is
nothing to shard: the model trains unwrapped (``fsdp_sharded`` false).
Parameters are made contiguous first (FSDP shards no channels-last
weights), and SGD takes its default step (PyTorch's fused SGD has no rule
for sharded parameters; fused AdamW has).

The replica check adapted to sharded parameters: a sharded parameter has no
replica to compare, so each rank (1) sums its shards (float64 sum, sum of
absolute values, element count), summed over ranks, and (2) gathers every
parameter whole (``full_tensor``) and checksums it; the shards must cover
every element exactly once and add up to the gathered parameters, and the
gathered checksums (with those of any parameter left unsharded, which FSDP
would not keep in step) must agree across ranks (MAX and MIN).  The test
hook (DLRUN_HARNESS_TEST_PERTURB_RANK=R) adds 1.0 to rank R's gathered copy
of the first parameter, so that tests can prove the comparison fires.

DataParallel: one process (a launcher starting several is refused) drives
every visible GPU, or the first --dataparallel-gpus N (more than it sees is
refused in one line); each step's batch is --batch-size per GPU times the GPU
count, scattered by DataParallel, whose replicas are copied from the
module every step (so there is no replica check).  On a node without CUDA
GPUs it is refused in one line.
"""

import torch

from harness_common import (EXIT_DIVERGED, EXIT_USAGE, REPLICA_RTOL,
                            HarnessError, NullContext)
from harness_pytorch_comm import Comm, perturbs


def fsdp_api(torch_mod=torch):
    """(fully_shard, MixedPrecisionPolicy, its public name), newest first."""
    for module in ("torch.distributed.fsdp",
                   "torch.distributed._composable.fsdp"):
        try:
            imported = __import__(module, fromlist=["fully_shard"])
        except ImportError:
            continue
        fully_shard = getattr(imported, "fully_shard", None)
        if fully_shard is not None:
            return (fully_shard, getattr(imported, "MixedPrecisionPolicy",
                                         None), module + ".fully_shard")
    raise HarnessError("--dist fsdp needs FSDP2 (torch.distributed.fsdp."
                       "fully_shard, PyTorch >= 2.4), which PyTorch %s "
                       "lacks; valid here: --dist ddp"
                       % torch_mod.__version__, EXIT_USAGE)


def _is_sharded(p):
    return hasattr(p, "full_tensor") and hasattr(p, "to_local")


def _sums(t):
    d = t.detach().double()
    return [float(d.sum()), float(d.abs().sum()), float(d.numel())]


class FsdpComm(Comm):
    """Comm over a process group whose model is sharded by FSDP2."""

    def __init__(self, rank, world_size, backend, device, timeout_s=None):
        Comm.__init__(self, rank, world_size, backend, device, timeout_s)
        self.fully_shard, self.policy_cls, self.api = fsdp_api()

    def fields(self):
        return {"dist": "fsdp", "horovod_version": None, "fsdp_api": self.api,
                "fsdp_sharded": self.world_size > 1,
                "fsdp_param_dtype": self.amp_dtype or "float32"}

    def wrap_model(self, model, device):
        # FSDP shards contiguous parameters only: channels-last convolution
        # weights go back to the default layout (activations keep theirs).
        model.to(memory_format=torch.contiguous_format)
        extra = {}
        if self.amp_dtype == "bfloat16" and self.policy_cls is not None:
            extra["mp_policy"] = self.policy_cls(param_dtype=torch.bfloat16,
                                                 reduce_dtype=torch.float32)
        units = getattr(model, "shard_units", lambda: [])()
        for unit in units:
            self.fully_shard(unit, **extra)
        self.fully_shard(model, **extra)
        return model

    def fused_mode(self, mode, optimizer):
        """PyTorch's fused SGD has no rule for sharded (DTensor) parameters;
        fused AdamW has."""
        if optimizer != "sgd" or mode == "off":
            return mode
        if mode == "on":
            raise HarnessError("--fused-optimizer on: PyTorch's fused SGD "
                               "cannot step FSDP's sharded parameters; "
                               "valid with --dist fsdp: auto or off")
        return "off"

    def accumulating(self, model, last):
        set_sync = getattr(model, "set_requires_gradient_sync", None)
        if set_sync is not None:
            set_sync(last)
        return NullContext()

    def check_replicas(self, module):
        local = [0.0, 0.0, 0.0]      # this rank's shards
        gathered = [0.0, 0.0, 0.0]   # the sharded parameters, whole
        unsharded = [0.0, 0.0]       # parameters FSDP left alone
        perturb = perturbs(self.rank)
        with torch.no_grad():
            for p in module.parameters():
                if not _is_sharded(p):
                    unsharded = [a + b for a, b in zip(unsharded, _sums(p))]
                    continue
                local = [a + b for a, b in zip(local, _sums(p.to_local()))]
                whole = p.full_tensor()
                if perturb:
                    whole = whole.clone()
                    whole.view(-1)[0] += 1.0
                    perturb = False
                gathered = [a + b for a, b in zip(gathered, _sums(whole))]
        shards = self.all_reduce(local, "SUM")
        cmax = self.all_reduce(gathered + unsharded, "MAX")
        cmin = self.all_reduce(gathered + unsharded, "MIN")
        return _sharded_verdict(shards, cmax, cmin, self.world_size)


def _sharded_verdict(shards, cmax, cmin, world_size, rtol=REPLICA_RTOL):
    """The same verdict on every rank, from reduced values only."""
    scale = max(abs(cmax[1]), abs(cmax[4]), abs(shards[1]), 1e-30)
    if shards[2] != cmax[2] or cmax[2] != cmin[2]:
        return ("sharded parameters: the ranks' shards hold %d elements, "
                "the gathered parameters %d" % (shards[2], cmax[2]),
                EXIT_DIVERGED)
    if any(abs(a - b) > rtol * scale for a, b in zip(cmax, cmin)):
        return ("replicas diverged: the gathered parameters (sum, abs sum, "
                "elements, then unsharded sum, abs sum) differ across %d "
                "ranks: max %r, min %r (relative tolerance %g)"
                % (world_size, cmax, cmin, rtol), EXIT_DIVERGED)
    if any(abs(a - b) > rtol * scale for a, b in zip(shards[:2], cmax[:2])):
        return ("sharded parameters: the shards add up to (sum, abs sum) %r, "
                "the gathered parameters to %r (relative tolerance %g)"
                % (shards[:2], cmax[:2], rtol), EXIT_DIVERGED)
    return None


class DataParallelComm(Comm):
    """One process, no process group; the model in torch.nn.DataParallel
    over the first ``count`` visible GPUs (None: every visible GPU)."""

    def __init__(self, device, count=None):
        Comm.__init__(self, 0, 1, "none", device)
        visible = torch.cuda.device_count()
        if count is not None and count > visible:
            raise HarnessError("--dataparallel-gpus %d: this process sees %d "
                               "GPU(s); valid: 1..%d" % (count, visible,
                                                         visible))
        self.devices_per_rank = count or visible

    @property
    def wraps(self):
        return True

    def fields(self):
        return {"dist": "dataparallel", "horovod_version": None,
                "dataparallel_devices": self.devices_per_rank}

    def wrap_model(self, model, device):
        ids = list(range(self.devices_per_rank))
        return torch.nn.DataParallel(model, device_ids=ids,
                                     output_device=device.index)

    def check_replicas(self, module):
        return None  # DataParallel copies the module to every GPU each step


def check_dataparallel(world_size, device_type):
    """One line where --dist dataparallel cannot run."""
    if device_type != "cuda" or not torch.cuda.is_available():
        raise HarnessError("--dist dataparallel: torch.nn.DataParallel "
                           "spreads a batch over CUDA GPUs, and this node "
                           "has none; valid on a CPU: --dist ddp or fsdp")
    if world_size != 1:
        raise HarnessError("--dist dataparallel runs one process for all of "
                           "the node's GPUs, found %d processes; start one "
                           "(dlrun: --ranks-per-node 1)" % world_size)
