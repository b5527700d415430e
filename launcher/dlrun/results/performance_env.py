"""Which of a run's own environment variables (`--env NAME=VALUE`) decide its value, by rule: the families below,
each with the reason. Two runs that differ in one of them (`--env NCCL_ALGO=Tree` against NCCL's own choice)
are not like-for-like, so the comparability key holds them (its `env` field); everything else a user sets
(paths, tokens, log levels) does not decide a rate and stays out. Secrets never enter the key, whatever their
name: their values are not even seen here (the stored plan holds them redacted).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from dlrun.secrets import REDACTED, is_secret

#: Name prefix -> why variables of that family decide performance.
FAMILIES: dict[str, str] = {
    "NCCL_": "NCCL's algorithm, protocol, transports, channels and buffers (NCCL_ALGO, NCCL_PROTO, NCCL_IB_*)",
    "TORCH_NCCL_": "PyTorch's NCCL process group (stream and blocking behaviour)",
    "UCX_": "UCX's transports and devices (UCX_TLS, UCX_NET_DEVICES, rendezvous thresholds)",
    "FI_": "libfabric's provider and its settings (Slingshot CXI, EFA, PSM2 through OFI)",
    "PSM2_": "Omni-Path's PSM2 library (GPU buffers, eager thresholds)",
    "HFI_": "Omni-Path's host fabric interface",
    "OMPI_MCA_": "Open MPI's component choice (pml, btl, coll)",
    "PMIX_MCA_": "PMIx's component choice",
    "MV2_": "MVAPICH2's collectives and transports",
    "I_MPI_": "Intel MPI's fabrics and collectives",
    "MPICH_": "MPICH's (and Cray MPICH's) collectives and transports",
    "GLOO_": "gloo's transport and interface",
    "HOROVOD_": "Horovod's fusion buffer, cycle time and collectives",
    "OMP_": "OpenMP threads, binding and wait policy",
    "KMP_": "Intel OpenMP's affinity and blocking time",
    "GOMP_": "GNU OpenMP's spin and affinity",
    "MKL_": "MKL's threads and code paths (MKL_ENABLE_INSTRUCTIONS, MKL_DEBUG_CPU_TYPE)",
    "OPENBLAS_": "OpenBLAS's threads and core type",
    "DNNL_": "oneDNN's instruction set and primitives (DNNL_MAX_CPU_ISA)",
    "ONEDNN_": "oneDNN's instruction set and primitives (ONEDNN_MAX_CPU_ISA)",
    "MALLOC_": "glibc malloc's arenas and trimming",
    "TCMALLOC_": "tcmalloc's caches",
    "JEMALLOC_": "jemalloc's configuration",
    "MALLOC_CONF": "jemalloc's configuration",
    "LD_PRELOAD": "a library replacing the allocator or other code",
    "CUDA_": "CUDA's launch and connection behaviour (CUDA_DEVICE_MAX_CONNECTIONS, CUDA_LAUNCH_BLOCKING)",
    "CUBLAS_": "cuBLAS's workspace and algorithms",
    "CUDNN_": "cuDNN's algorithms",
    "NVIDIA_TF32_OVERRIDE": "TF32 on or off below the framework",
    "PYTORCH_": "PyTorch's CUDA allocator and kernels (PYTORCH_CUDA_ALLOC_CONF)",
    "TORCH_": "PyTorch's runtime switches (TORCH_CUDNN_V8_API_*, TORCHINDUCTOR_*)",
    "TORCHINDUCTOR_": "torch.compile's code generation",
    "TF_": "TensorFlow's runtime (TF_ENABLE_ONEDNN_OPTS, TF_GPU_THREAD_MODE)",
    "XLA_FLAGS": "XLA's compiler",
}
NONE = "none"


def family(name: str) -> str | None:
    """The family (FAMILIES' prefix) a variable belongs to, else None."""
    found = [prefix for prefix in FAMILIES if name == prefix or (prefix.endswith("_") and name.startswith(prefix))]
    return max(found, key=len) if found else None


def performance_env(env: Mapping[str, str], secret: Iterable[str] = ()) -> str:
    """The key's `env` field: `NAME=VALUE` of every variable of `env` in a family, sorted, space-separated;
    `none` where there is none. Secrets (by name, marking or redacted value) are left out."""
    secret = set(secret)
    words = [f"{name}={value}" for name, value in sorted(env.items())
             if family(name) and name not in secret and value != REDACTED and not is_secret(name, str(value))]
    return " ".join(words) or NONE
