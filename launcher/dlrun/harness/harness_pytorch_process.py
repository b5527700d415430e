"""dlrun PyTorch harness: the process - its rank and world size from the
launcher's environment, its allocator, threads, device and backend, and the
result fields that say what it ran on.  Standard library + torch; runs on
Python >= 3.6 with PyTorch >= 1.0.

The ``DLRUN_RESULT {json}`` line rank 0 prints last: its fields, their types,
units and which the training, collective and storage results require are
declared once, in harness_result_schema.py.
"""

import platform

import torch

from harness_pytorch_allocator import ALLOCATOR, setup_allocator
from harness_common import (HARNESS_VERSION,
                            HarnessError, cpu_name, node_facts)
from harness_ranks import check_world_size, detect_rank_env


# --- Device, backend and what the process runs on ---------------------------

def _resolve_device(choice):
    cuda_ok = torch.cuda.is_available()
    if choice == "cuda" and not cuda_ok:
        raise HarnessError("--device cuda: no CUDA device is available")
    if choice == "auto":
        return "cuda" if cuda_ok else "cpu"
    return choice


def _resolve_backend(choice, device_type):
    if choice == "auto":
        return "nccl" if device_type == "cuda" else "gloo"
    if choice == "nccl" and device_type != "cuda":
        raise HarnessError("--backend nccl needs --device cuda")
    return choice


def _versions(device_type):
    info = {
        "framework": "pytorch",
        "framework_version": str(torch.__version__),
        "python_version": platform.python_version(),
    }
    version = getattr(torch, "version", None)
    cuda = getattr(version, "cuda", None)
    if cuda:
        info["cuda_version"] = str(cuda)
    if device_type == "cuda":
        cudnn = getattr(torch.backends, "cudnn", None)
        try:
            v = cudnn.version() if cudnn is not None else None
        except Exception:
            v = None
        if v:
            info["cudnn_version"] = str(v)
        nccl = getattr(torch.cuda, "nccl", None)
        try:
            v = nccl.version() if nccl is not None else None
        except Exception:
            v = None
        if v:
            if isinstance(v, (tuple, list)):
                v = ".".join(str(x) for x in v)
            info["nccl_version"] = str(v)
    return info


def torch_gpus():
    """[{name, memory_mib}] of the GPUs this PyTorch sees."""
    if not torch.cuda.is_available():
        return []
    return [{"name": torch.cuda.get_device_name(i),
             "memory_mib": torch.cuda.get_device_properties(i).total_memory
             / 2.0 ** 20} for i in range(torch.cuda.device_count())]


def run_fields(device_type):
    """Result fields every benchmark shares: allocator, versions, status,
    and the node the job ran on (harness_common.node_facts)."""
    fields = {
        "allocator": ALLOCATOR["name"],
        "allocator_library": ALLOCATOR["library"],
        "harness_version": HARNESS_VERSION,
        "status": "ok",
        "node": node_facts(torch_gpus()),
    }
    fields.update(_versions(device_type))
    return fields


def setup_process(args, ranks=None):
    """What every benchmark does first: check the world size, settle the
    allocator and threads, pick the device and the backend.  ``ranks``:
    (rank, world size, local rank, source) where a distribution layer
    (Horovod) says them; otherwise they come from the environment."""
    rank, world_size, local_rank, rank_source = (
        ranks if ranks is not None else detect_rank_env())
    check_world_size(args.expected_world_size, world_size, rank, rank_source)
    if ALLOCATOR["name"] is None or args.allocator not in ("auto",
                                                           ALLOCATOR["name"]):
        setup_allocator(args.allocator, allow_exec=False)
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    device_type = _resolve_device(args.device)
    if device_type == "cuda":
        count = torch.cuda.device_count()
        index = (local_rank if local_rank is not None else rank) % count
        torch.cuda.set_device(index)
        device = torch.device("cuda", index)
        # cuDNN times its algorithms per shape unless --cudnn-benchmark off
        torch.backends.cudnn.benchmark = (
            getattr(args, "cudnn_benchmark", "auto") != "off")
        device_name = torch.cuda.get_device_name(index)
    else:
        device = torch.device("cpu")
        device_name = cpu_name()
    backend = _resolve_backend(args.backend, device_type)
    return (rank, world_size, rank_source, device_type, device, device_name,
            backend)


def setup_pair_process(args, benchmark):
    """setup_process for a benchmark between ranks (a collective, sendrecv):
    one process alone is refused."""
    fields = setup_process(args)
    if fields[1] < 2:
        raise HarnessError(
            "--benchmark %s needs at least 2 ranks, found 1; start it with 2 "
            "or more processes (e.g. mpirun -np 2, torchrun --nproc-per-node "
            "2)" % benchmark)
    return fields
