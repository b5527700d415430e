"""`dlrun doctor`: this node's inventory and the pre-launch checks for a system's default job, or for the
launcher, runtime and fabric given (resolved as `dlrun run` resolves them)."""
from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Annotated, Any, Optional

import typer

from dlrun.cli.options import JsonOpt, load_catalog, typer_parameter
from dlrun.cli.output import handle_errors, print_json, table

#: The run options (declared in dlrun.runoptions) doctor takes, to check another combination.
CHOICES = ("launcher", "runtime", "fabric")


def _takes_choices(command: Callable[..., None]) -> Callable[..., None]:
    """Give `command(own options..., **choices)` the declared run options in CHOICES, as `dlrun run` has them."""
    from dlrun.runoptions import option

    own = [p for p in inspect.signature(command, eval_str=True).parameters.values()
           if p.kind is not inspect.Parameter.VAR_KEYWORD]
    command.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [*own, *(typer_parameter(option(name)) for name in CHOICES)])
    return command


@handle_errors
@_takes_choices
def doctor(image: Annotated[Optional[str], typer.Option("--image", "-i", help="Check this image too.")] = None,
           system: Annotated[Optional[str], typer.Option("--system", "-s",
                                                         help="Check for this system profile.")] = None,
           as_json: JsonOpt = False, **choices: Optional[str]) -> None:
    """Check this node before a run: inventory (CPU/NUMA, GPUs, fabrics, NICs, container runtimes, MPI/PMI,
    schedulers) and whether the system's launcher, runtime, fabric (or those given) and the image's MPI fit
    together.

    Example: `dlrun doctor --system txgaia --image pytorch1.0-horovod --fabric roce`"""
    from dlrun.images.verify import with_local_image
    from dlrun.preflight import doctor_report

    report = doctor_report(load_catalog(), system=system, image=image, local_image=with_local_image, **choices)
    errors = [c for c in report["checks"] if c["level"] == "error"]
    if as_json:
        print_json(report)
    else:
        _print_doctor(report)
    if errors:
        raise typer.Exit(1)


def _print_doctor(report: dict[str, Any]) -> None:
    inv = report["inventory"]
    cpu = inv["cpu"]
    mpi = inv["mpi"]
    gpus = inv["gpu"]["gpus"]
    runtimes = [f"{name} {info['version'] or ''}".strip() for name, info in inv["container_runtimes"].items()
                if info["path"]]
    rows = [
        ["host", f"{inv['hostname']} ({inv['os']}, {inv['arch']}, kernel {inv['kernel']})"],
        ["cpu", f"{cpu['model']}: {cpu['sockets']} socket(s), {cpu['physical_cores']} cores, "
                f"{cpu['logical_cpus']} logical; NUMA "
                + ", ".join(f"{n['node']}:{n['cpulist']}" for n in cpu['numa'])],
        ["memory", f"{inv['memory_gb']} GB"],
        ["gpus", ", ".join(f"{g['index']}: {g['name']} (NUMA {g['numa_node']})" for g in gpus) or "none"],
        ["fabrics", ", ".join(inv["fabrics"]["usable"])],
        ["container runtimes", ", ".join(runtimes) or "none"],
        ["mpi", f"{mpi['flavour']} {mpi['version']}" if mpi["flavour"] else "none"],
        ["slurm mpi plugins", ", ".join(mpi["slurm_mpi_plugins"]) or "none"],
        ["plan", ", ".join(f"{k} {v}" for k, v in report["plan"].items())],
    ]
    for check in report["checks"]:
        rows.append([f"{check['level']}: {check['check']}",
                     check["message"] + (f"; fix: {check['fix']}" if check.get("fix") else "")])
    table("dlrun doctor", ["item", "value"], rows)
