"""A fixed catalog for rendering tests: a 4-node GPU system with every fabric configured, and a container
image with a registry uri, so that rendered commands depend on nothing on this machine."""
from __future__ import annotations

import functools

from dlrun.catalog import load_catalog

from dlrun.probe.host import probe_host
from dlrun.catalog.loader import Catalog
from dlrun.catalog.models import (CpuSpec, FabricConfig, GpuSpec, ImageSpec, SchedulerOptions, Source,
                                  SystemSpec)
from dlrun.images.verify import with_local_image
from dlrun.plan import Plan, resolve_plan
from dlrun.probe.fabric_devices import FABRIC_ORDER
from dlrun.registry import LAUNCHERS as LAUNCHER_REGISTRY
from dlrun.registry import SCHEDULERS

# Every runtime the project ships; the registry must hold at least these.
EXPECTED_RUNTIMES = {"host", "singularity", "apptainer", "docker", "podman", "charliecloud", "enroot"}
# Cases come from the registries: a new launcher is in the matrix (and needs golden text) without an edit here.
LAUNCHERS = LAUNCHER_REGISTRY.names()
FABRICS = list(FABRIC_ORDER)
# Each launcher renders under Slurm when it can (the matrix system's scheduler), else under the first that takes it.
SCHEDULER_FOR = {name: next(s for s in ["slurm", *SCHEDULERS.names()] if LAUNCHER_REGISTRY.get(name).supports(
    SCHEDULERS.get(s))) for name in LAUNCHERS}

MATRIX_SYSTEM = SystemSpec(
    name="matrix",
    description="rendering tests: 4 nodes x 2 GPUs, every fabric",
    arch="x86_64",
    nodes=4,
    cpu=CpuSpec(model="Test CPU", sockets=2, cores_per_socket=8, numa_nodes=2),
    memory_gb=256,
    gpus=GpuSpec(model="Test GPU", count_per_node=2, memory_gb=16, numa_affinity=[0, 1]),
    fabrics=["ib", "opa", "roce", "tcp"],
    default_fabric="ib",
    fabric_config={
        "ib": FabricConfig(hca=["mlx5_0:1"], interfaces=["ib0"]),
        "opa": FabricConfig(hca=["hfi1_0:1"], interfaces=["ib0"]),
        "roce": FabricConfig(hca=["mlx5_1:1"], interfaces=["eth2"]),
        "tcp": FabricConfig(interfaces=["eth0"]),
    },
    scheduler="slurm",
    launcher="srun",
    runtime="singularity",
    default_image="matrix-image",
    data_loader_workers=4,
    scheduler_options=SchedulerOptions(partition="gpu", account="proj1", time="00:20:00", exclusive=True),
    sources=[Source(doc="dlrun tests", where="tests/matrix_catalog.py")],
)
MATRIX_IMAGE = ImageSpec(name="matrix-image", description="rendering tests", kind="container", arch=["x86_64", "ppc64le"],
                         framework="pytorch", framework_version="2.6.0", python="python3",
                         harness_dir="/opt/dlrun", uri="registry.example.org/dlrun/matrix",
                         horovod_version="0.28.1")  # so that --launcher horovodrun renders in every runtime


@functools.lru_cache(maxsize=1)
def matrix_catalog() -> Catalog:
    base = load_catalog(host=probe_host())
    return Catalog(images={**base.images, MATRIX_IMAGE.name: MATRIX_IMAGE}, workloads=base.workloads,
                   systems={**base.systems, MATRIX_SYSTEM.name: MATRIX_SYSTEM})


def matrix_plan(runtime: str, launcher: str, fabric: str, *, scheduler: str | None = None, **options) -> Plan:
    single = launcher == "none"
    return resolve_plan(matrix_catalog(), "trivial", system="matrix", runtime=runtime, launcher=launcher,
                        fabric=fabric, scheduler=scheduler or SCHEDULER_FOR[launcher],
                        nodes=1 if single else options.pop("nodes", 2),
                        ranks_per_node=1 if single else options.pop("ranks_per_node", 2),
                        steps=options.pop("steps", 3), warmup_steps=options.pop("warmup_steps", 1),
                        batch_size=options.pop("batch_size", 8), local_image=with_local_image, **options)
