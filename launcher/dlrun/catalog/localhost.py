"""The built-ins made from a probed host rather than written in YAML: system `localhost` and images `host`
(PyTorch) and `host-tf` (TensorFlow 2).
Pure functions of `HostFacts` (dlrun.probe.host), so tests can describe any machine."""
from __future__ import annotations

from dlrun.catalog.models import CpuSpec, FabricConfig, GpuSpec, ImageSpec, Source, SystemSpec
from dlrun.paths import HARNESS_DIR
from dlrun.harness.harness_node import ARCHES
from dlrun.probe.host import HostFacts


def _gpu_spec(facts: HostFacts) -> GpuSpec | None:
    if not facts.gpus:
        return None
    first = facts.gpus[0]
    numa = [gpu.get("numa_node") for gpu in facts.gpus]
    memory = first.get("memory_mib")
    return GpuSpec(model=first["name"], count_per_node=len(facts.gpus),
                   memory_gb=round(float(memory) / 1024, 1) if memory is not None else None,
                   numa_affinity=None if None in numa else [int(n) for n in numa])  # type: ignore[arg-type]


def _arch(facts: HostFacts) -> str:
    return facts.arch if facts.arch in ARCHES else "x86_64"


def localhost_system(facts: HostFacts) -> SystemSpec:
    fabric_config = {name: FabricConfig(**cfg) for name, cfg in facts.fabrics.get("config", {}).items()}
    return SystemSpec(
        name="localhost",
        description=f"This machine ({facts.hostname}), detected: {facts.usable_cpus} CPUs"
        + (f", {len(facts.gpus)} GPU(s)" if facts.gpus else ", no GPU"),
        arch=_arch(facts),  # type: ignore[arg-type]
        nodes=1,
        cpu=CpuSpec(model=facts.cpu_model, sockets=1, cores_per_socket=facts.usable_cpus,
                    numa_nodes=facts.numa_nodes),
        memory_gb=facts.memory_gb,
        gpus=_gpu_spec(facts),
        fabrics=list(fabric_config) or ["tcp"],  # best first: ib, opa, roce, tcp
        default_fabric="auto",
        fabric_config=fabric_config,
        scheduler="local",
        launcher="mpirun",
        runtime="host",
        default_image="host",
        # Small enough that `dlrun run resnet50` finishes in seconds per step on a laptop-class CPU.
        batch_sizes={"lenet": 64, "trivial": 64},
        default_batch_size=16,
        # Short by default: a first `dlrun run resnet50` on a 2-core machine finishes in about a minute.
        default_steps=10,
        default_warmup_steps=2,
        sources=[Source(doc="detected", where="/proc, /sys, nvidia-smi")],
        detected=True,
    )


def host_image(facts: HostFacts) -> ImageSpec:
    """No container: the harness runs with this Python, from the installed package."""
    return ImageSpec(
        name="host",
        description="No container: the local Python interpreter and its installed PyTorch",
        kind="host",
        arch=[_arch(facts)],  # type: ignore[list-item]
        framework="pytorch",
        python=facts.python,
        harness_dir=str(HARNESS_DIR),
        horovod_version=facts.horovod,
    )


def host_tf_image(facts: HostFacts) -> ImageSpec:
    """No container, TensorFlow 2: dlrun's TensorFlow harness with this Python (needs the `tf` extra)."""
    return ImageSpec(
        name="host-tf",
        description="No container: the local Python interpreter and its installed TensorFlow 2 (Keras 3), "
                    "dlrun's TensorFlow harness",
        kind="host",
        arch=[_arch(facts)],  # type: ignore[list-item]
        framework="tensorflow",
        runs="dlrun-harness",
        python=facts.python,
        harness_dir=str(HARNESS_DIR),
        # several processes need Horovod built with TensorFlow support (`make horovod` builds it)
        horovod_version=facts.horovod if facts.horovod_tensorflow else None,
    )
