"""Which scheduler, launcher and runtime start the ranks, and how the PyTorch harness distributes training."""
from __future__ import annotations

from typing import Any

from dlrun.catalog import Catalog
from dlrun.catalog.models import ImageSpec, SystemSpec, WorkloadSpec
from dlrun.catalog.stack import NcclTests
from dlrun.errors import UsageError
from dlrun.registry import LAUNCHERS, RUNTIMES, SCHEDULERS

#: The launcher of a job that is one process on this machine: none.
SINGLE_PROCESS = "none"


def resolve_backends(catalog: Catalog, req: Any, work: WorkloadSpec, img: ImageSpec, system: SystemSpec, *,
                     world: int) -> dict[str, Any]:
    """--scheduler, --launcher, --runtime (else the system's; one local rank needs no launcher, a host image no
    runtime), --dist and --launcher-arg."""
    scheduler = req.scheduler or system.scheduler
    SCHEDULERS.check(scheduler)
    one_process = world == 1 and SCHEDULERS.get(scheduler).runs_here
    launcher = req.launcher or (SINGLE_PROCESS if one_process else system.launcher)
    runtime = req.runtime or ("host" if img.kind == "host" else system.runtime)
    for registry, name in ((LAUNCHERS, launcher), (RUNTIMES, runtime)):
        registry.check(name)
    if work.kind == "nccl-tests":
        check_nccl_tests(catalog, work, img, system, launcher)
    return {"scheduler": scheduler, "launcher": launcher, "runtime": runtime,
            "dist": resolve_dist(catalog, req.dist, work, img, system, launcher),
            "launcher_args": list(req.launcher_arg)}


def resolve_dist(catalog: Catalog, dist: str | None, work: WorkloadSpec, img: ImageSpec, system: SystemSpec,
                 launcher: str) -> str | None:
    """--dist, else Horovod under horovodrun, else the system's default (training only); an image without
    Horovod cannot run it. None for TensorFlow images: tf_cnn_benchmarks distributes by itself."""
    if work.kind == "command":
        if dist is not None:
            raise UsageError(f"--dist {dist} applies to dlrun's PyTorch harness, but workload {work.name!r} runs the "
                             "site's own command, which distributes by itself; valid: no --dist")
        return None
    if img.framework != "pytorch":
        if dist is not None:
            raise UsageError(f"--dist {dist} applies to dlrun's PyTorch harness, but image {img.name!r} runs "
                             "tf_cnn_benchmarks (TensorFlow), which distributes by itself; valid: no --dist")
        return None
    if LAUNCHERS.get_class(launcher).horovod_ranks:
        if dist == "ddp":
            raise UsageError(f"--launcher {launcher} starts Horovod ranks, but --dist ddp asks for "
                             "DistributedDataParallel; valid: --dist horovod, or --launcher mpirun")
        dist = "horovod"
    if not work.trains:
        if dist in ("fsdp", "dataparallel"):
            raise UsageError(f"--dist {dist} distributes training, but workload {work.name!r} measures "
                             f"{work.measures}; valid: no --dist (or --dist ddp)")
        if dist == "horovod":
            raise UsageError(f"--dist horovod (or --launcher horovodrun) applies to training, but workload "
                             f"{work.name!r} measures all-reduce over a torch.distributed process group; "
                             "valid: --dist ddp with --launcher mpirun")
        return "ddp"
    chosen = dist or system.dist
    if chosen == "horovod" and img.horovod_release() is None:
        have = sorted(name for name, other in catalog.images.items()
                      if other.framework == "pytorch" and other.horovod_release() and system.arch in other.arch)
        why = ("--dist horovod" if dist else f"system {system.name!r} trains with Horovod by default (dist: horovod)")
        images = " or ".join(f"--image {name}" for name in have) or "an image with Horovod"
        raise UsageError(f"{why}, but image {img.name!r} has no Horovod; valid: {images}, or --dist ddp")
    return chosen


def check_nccl_tests(catalog: Catalog, work: WorkloadSpec, img: ImageSpec, system: SystemSpec, launcher: str) -> None:
    """nccl-tests runs from the image's own MPI=1 build, one process per GPU, started by an MPI-aware launcher
    (started any other way, every process would be a one-rank test of its own)."""
    if not isinstance(getattr(img, "nccl_tests", None), NcclTests):
        having = sorted(name for name, spec in catalog.images.items()
                        if isinstance(getattr(spec, "nccl_tests", None), NcclTests))
        raise UsageError(f"image {img.name!r} has no nccl-tests, which workload {work.name!r} runs; valid images: "
                         f"{', '.join(having) or 'none in this catalog'} (--image NAME)")
    if not system.gpus_per_node:
        raise UsageError(f"workload {work.name!r} runs nccl-tests, which needs GPUs, but system {system.name!r} has "
                         "none; valid: a GPU system (--system NAME, see dlrun systems list)")
    if not LAUNCHERS.get_class(launcher).starts_mpi_programs:  # nccl-tests is built with MPI=1
        able = [name for name, each in LAUNCHERS.available().items() if each.starts_mpi_programs]
        raise UsageError(f"workload {work.name!r} runs nccl-tests (an MPI program) and cannot be started by "
                         f"launcher {launcher}; valid: {', '.join(able)}")
