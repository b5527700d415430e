"""Host MPI against the image's MPI for the hybrid model (and PMI for srun)."""
from __future__ import annotations

from typing import Any

from dlrun.preflight.findings import Finding
from dlrun.probe.mpi import MpiInfo, parse_mpi_version


def image_mpi(image: Any) -> MpiInfo | None | str:
    """The image's MPI from its pinned stack: MpiInfo, None when the image declares none, or "not_used"."""
    spec = getattr(image, "mpi", None)
    if spec is None:
        return None
    if getattr(spec, "not_used", None):
        return "not_used"
    if isinstance(spec, str):
        return parse_mpi_version(spec)
    flavour = getattr(spec, "flavour", None) or (spec.get("flavour") if isinstance(spec, dict) else None)
    version = getattr(spec, "version", None) or (spec.get("version") if isinstance(spec, dict) else None)
    pmi = getattr(spec, "pmi", None) or (spec.get("pmi") if isinstance(spec, dict) else None) or ()
    if not flavour:
        return None
    return MpiInfo(flavour=str(flavour), version=str(version) if version else None, pmi=tuple(pmi))


def uses_image_mpi(plan: Any) -> bool:
    """Whether the ranks load the image's MPI library. The PyTorch harness does not: it reads its rank from
    the launcher's environment and communicates over gloo/NCCL. Horovod (horovodrun, --dist horovod, and the
    TensorFlow stacks built on Horovod) does."""
    return (plan.launcher == "horovodrun" or getattr(plan, "dist", None) == "horovod"
            or plan.image.framework != "pytorch" or plan.workload.framework != "pytorch")


def check_mpi_compat(host: MpiInfo | None, container: MpiInfo | None | str, *, launcher: str,
                     runtime: str, srun_mpi: str = "pmix", uses_mpi: bool = True) -> list[Finding]:
    """Host vs container MPI for the hybrid model (and PMI for srun). When the ranks do not load the image's
    MPI (`uses_mpi` False) a mismatch is a warning: this job runs, an MPI program in the same image would not."""
    findings = _mpi_compat(host, container, launcher=launcher, runtime=runtime, srun_mpi=srun_mpi)
    if uses_mpi:
        return findings
    return [Finding("warn", f.check, f.message + " (this job's ranks do not load the image's MPI, so it runs; "
                    "an MPI or Horovod program in this image would not)", f.fix) if f.level == "error" else f
            for f in findings]


def _mpi_compat(host: MpiInfo | None, container: MpiInfo | None | str, *, launcher: str,
                runtime: str, srun_mpi: str) -> list[Finding]:
    check = "mpi-compat"
    if runtime == "host" or container is None:
        if runtime != "host" and launcher in ("mpirun", "horovodrun"):
            return [Finding("warn", check, "the image declares no MPI, so host/container compatibility cannot be "
                            "checked", "pin the image's MPI in containers/<tag>/image.yaml")]
        return []
    if container == "not_used":
        return [Finding("ok", check, "the image has no MPI: ranks use only the launcher's environment")]
    assert isinstance(container, MpiInfo)
    if launcher in ("mpirun", "horovodrun"):
        if host is None:
            return [Finding("error", check, f"{launcher} needs an MPI on the host, none found",
                            f"install or load {container.describe()} on the host, or use --launcher srun")]
        if host.family != container.family:
            return [Finding("error", check,
                            f"host {host.describe()} cannot start ranks that use the image's {container.describe()}: "
                            "different MPI families do not share a launch protocol (every rank would see "
                            "itself as rank 0 of 1, or hang)",
                            f"use a host {container.flavour} {container.version} (module load), or --launcher srun "
                            "with PMIx, or an image built with the host's MPI")]
        if host.series and container.series and host.series != container.series:
            return [Finding("error", check,
                            f"host {host.describe()} and image {container.describe()} are different release series "
                            f"({host.series[0]}.{host.series[1]} vs {container.series[0]}.{container.series[1]}); "
                            "the host launcher and the image's MPI library must match in major.minor",
                            f"use Open MPI {container.series[0]}.{container.series[1]}.x on the host (module load "
                            f"openmpi/{container.series[0]}.{container.series[1]}), or --launcher srun with PMIx, or "
                            f"an image pinned to Open MPI {host.series[0]}.{host.series[1]}")]
        if host.series is None or container.series is None:
            return [Finding("warn", check, f"cannot compare versions of host {host.describe()} and image "
                            f"{container.describe()}")]
        return [Finding("ok", check, f"host {host.describe()} and image {container.describe()} match in "
                        f"major.minor")]
    if launcher == "srun":
        wanted = "pmix" if srun_mpi.startswith("pmix") else srun_mpi
        if container.pmi and wanted not in container.pmi:
            return [Finding("error", check,
                            f"srun --mpi={srun_mpi} but the image's {container.describe()} supports "
                            f"{', '.join(container.pmi)} only",
                            f"set scheduler_options.srun_mpi to {container.pmi[0]} in the system profile, or use "
                            "an image built with PMIx")]
        return [Finding("ok", check, f"srun --mpi={srun_mpi} and image {container.describe()}")]
    return []
