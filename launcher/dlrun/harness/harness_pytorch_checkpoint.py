"""dlrun PyTorch harness: ``--checkpoint-every N`` - the model's and the
optimizer's state saved to ``--checkpoint-dir`` after every N-th timed
step, timed, so that a run answers how long a checkpoint takes on its
storage (Han et al.'s checkpoint times).  Standard library + torch;
importable on Python >= 3.6 with PyTorch >= 1.0.

How a checkpoint is written:

* ddp, horovod, dataparallel and one process: rank 0 writes
  ``step-N/checkpoint.pt`` with ``torch.save`` ({"model", "optimizer",
  "step"}: the replicas are identical), flushes it and fsyncs it.
* fsdp (sharded parameters): every rank writes its shards through
  ``torch.distributed.checkpoint`` (``dcp.save``, whose file system writer
  fsyncs every file) into ``step-N/``, the model's and the optimizer's
  sharded state dicts (``get_state_dict``).

The time of one checkpoint runs from a barrier before it to a barrier after
it (every rank's file is on storage), the slowest rank's; the bytes are
those of the files the checkpoint left in its directory.  GB/s = bytes /
seconds (1e9 bytes).  Only the newest checkpoint is kept: the one before is
removed after the next is written (not timed).  The training rate excludes
the checkpoints (``wall_time_excludes``); the result records every
checkpoint's seconds and bytes and their totals.

A directory that cannot be created or written fails the run at start with
one line naming it.
"""

import os
import shutil
import time

import torch

from harness_common import HarnessError


def _directory_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            total += os.path.getsize(os.path.join(root, name))
    return total


def _dcp():
    try:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict
    except ImportError as exc:
        raise HarnessError("--checkpoint-every with --dist fsdp needs "
                           "torch.distributed.checkpoint (PyTorch >= 2.2): "
                           "%s" % exc)
    return dcp, get_state_dict


class Checkpointer(object):
    """Saves and times the checkpoints of one run."""

    def __init__(self, directory, every, comm, sharded):
        self.directory, self.every, self.comm = directory, every, comm
        self.sharded = sharded
        self.records = []
        self._previous = None
        if sharded:
            _dcp()  # refuse at start, not after the first N steps
        if comm.rank == 0:
            try:
                if not os.path.isdir(directory):
                    os.makedirs(directory)
                probe = os.path.join(directory, ".dlrun-write-test")
                with open(probe, "w") as f:
                    f.write("ok\n")
                os.remove(probe)
            except (IOError, OSError) as exc:
                raise HarnessError("--checkpoint-dir %s: cannot write there "
                                   "(%s)" % (directory, exc.strerror or exc))

    def due(self, step):
        return step % self.every == 0

    def save(self, step, model, optimizer):
        """Write one checkpoint; its seconds (slowest rank)."""
        path = os.path.join(self.directory, "step-%d" % step)
        self.comm.barrier()
        start = time.perf_counter()
        if self.sharded:
            dcp, get_state_dict = _dcp()
            model_state, optim_state = get_state_dict(model, optimizer)
            dcp.save({"model": model_state, "optimizer": optim_state,
                      "step": step}, checkpoint_id=path)
        elif self.comm.rank == 0:
            if not os.path.isdir(path):
                os.makedirs(path)
            target = os.path.join(path, "checkpoint.pt")
            with open(target, "wb") as f:
                torch.save({"model": model.state_dict(),
                            "optimizer": optimizer.state_dict(),
                            "step": step}, f)
                f.flush()
                os.fsync(f.fileno())
        self.comm.barrier()
        local = time.perf_counter() - start
        seconds = self.comm.all_reduce([local], "MAX")[0]
        size = _directory_bytes(path) if self.comm.rank == 0 else 0
        size = int(self.comm.all_reduce([float(size)], "MAX")[0])
        self.records.append({"step": step, "seconds": seconds,
                             "bytes": size})
        if self.comm.rank == 0 and self._previous is not None:
            shutil.rmtree(self._previous, ignore_errors=True)
        self._previous = path
        return seconds

    def fields(self):
        seconds = sum(r["seconds"] for r in self.records)
        size = sum(r["bytes"] for r in self.records)
        return {
            "checkpoint_every": self.every,
            "checkpoint_dir": self.directory,
            "checkpoint_format": ("torch.distributed.checkpoint (shards of "
                                  "every rank)" if self.sharded else
                                  "torch.save by rank 0, fsynced"),
            "checkpoints": self.records,
            "checkpoint_count": len(self.records),
            "checkpoint_seconds": seconds,
            "checkpoint_bytes": size,
            "checkpoint_gbs": size / seconds / 1e9 if seconds > 0 else None,
            "checkpoint_gbs_formula": "sum of bytes / sum of seconds "
                                      "(barrier to barrier, slowest rank)",
        }
