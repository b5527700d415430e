"""Host MPI against the image's MPI for the hybrid model, and the launcher's PMI against the image's. What
the checks need of the launcher and the runtime they ask them (`Launcher.host_mpi`, `ranks_load_mpi`,
`pmi_request`, `Runtime.runs_container`)."""
from __future__ import annotations

from typing import Any

from dlrun.launchers.base import Launcher, PmiRequest
from dlrun.preflight.findings import Finding
from dlrun.probe.mpi import MpiInfo, parse_mpi_version
from dlrun.registry import LAUNCHERS
from dlrun.runtimes.base import Runtime


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
    the launcher's environment and communicates over gloo/NCCL. Horovod (a launcher whose ranks load MPI,
    --dist horovod, and the TensorFlow stacks built on Horovod) does."""
    return (LAUNCHERS.get(plan.launcher).ranks_load_mpi or getattr(plan, "dist", None) == "horovod"
            or plan.image.framework != "pytorch" or plan.workload.framework != "pytorch")


def check_mpi_compat(host: MpiInfo | None, container: MpiInfo | None | str, *, launcher: Launcher,
                     runtime: Runtime, pmi: PmiRequest | None = None, uses_mpi: bool = True) -> list[Finding]:
    """Host vs container MPI for the hybrid model (and the image's support for the launcher's PMI). When the
    ranks do not load the image's MPI (`uses_mpi` False) a mismatch is a warning: this job runs, an MPI
    program in the same image would not."""
    findings = _mpi_compat(host, container, launcher=launcher, runtime=runtime, pmi=pmi)
    if uses_mpi:
        return findings
    return [Finding("warn", f.check, f.message + " (this job's ranks do not load the image's MPI, so it runs; "
                    "an MPI or Horovod program in this image would not)", f.fix) if f.level == "error" else f
            for f in findings]


def _mpi_compat(host: MpiInfo | None, container: MpiInfo | None | str, *, launcher: Launcher,
                runtime: Runtime, pmi: PmiRequest | None) -> list[Finding]:
    check = "mpi-compat"
    if not runtime.runs_container or container is None:
        if runtime.runs_container and launcher.host_mpi:
            return [Finding("warn", check, "the image declares no MPI, so host/container compatibility cannot be "
                            "checked", "pin the image's MPI in containers/<tag>/image.yaml")]
        return []
    if container == "not_used":
        return [Finding("ok", check, "the image has no MPI: ranks use only the launcher's environment")]
    assert isinstance(container, MpiInfo)
    if launcher.host_mpi:
        return _host_mpi_compat(host, container, launcher.name)
    if pmi is not None:
        if container.pmi and pmi.family not in container.pmi:
            return [Finding("error", check,
                            f"{pmi.shown} but the image's {container.describe()} supports "
                            f"{', '.join(container.pmi)} only",
                            f"set {pmi.setting} to {container.pmi[0]} in the system profile, or use "
                            "an image built with PMIx")]
        return [Finding("ok", check, f"{pmi.shown} and image {container.describe()}")]
    return []


def _host_mpi_compat(host: MpiInfo | None, container: MpiInfo, launcher: str) -> list[Finding]:
    """The host's MPI launcher starts ranks that load the image's MPI: one family, one release series."""
    check = "mpi-compat"
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
