"""Options shared by several commands, and the few steps every command that resolves a plan takes."""
from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from typing import Annotated, Any, Optional

import typer



def _names(kind: str):
    """Shell completion of catalog names (`dlrun run res<TAB>`)."""
    def complete(incomplete: str) -> list[str]:
        try:
            names = getattr(load_catalog(), kind)
        except Exception:  # noqa: BLE001 - a broken site catalog must not break the user's shell
            return []
        return sorted(name for name in names if name.startswith(incomplete))
    return complete


JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON output.")]
Workload = Annotated[str, typer.Argument(help="Workload name (see `dlrun workloads list`).", show_default=False,
                                         autocompletion=_names("workloads"))]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Print the exact script that would run; run nothing.")]
SkipChecksOpt = Annotated[bool, typer.Option(
    "--skip-checks", help="Run even if the pre-launch checks refuse (a submit host is not a compute node).")]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v",
                                          help="Also print the raw DLRUN_RESULT line and every job line.")]

_TYPES = {int: Optional[int], float: Optional[float], str: Optional[str], list: Optional[list[str]],
          bool: Optional[bool]}


def typer_parameter(opt) -> inspect.Parameter:
    """The typer option of one declared run option (dlrun.runoptions): flags, help with its default's source,
    completion from the catalog it names."""
    literal_default = opt.default is not None and opt.type is not bool
    info = typer.Option(*opt.flags, help=opt.help_text(), show_default=literal_default,
                        metavar=opt.metavar, autocompletion=_names(opt.completion) if opt.completion else None)
    annotation = Annotated[bool if opt.type is bool and opt.default is not None else _TYPES[opt.type], info]
    return inspect.Parameter(opt.name, inspect.Parameter.KEYWORD_ONLY, default=opt.default, annotation=annotation)


def plan_parameters() -> list[inspect.Parameter]:
    """The workload argument and every declared run option: what `run` and `plan` take."""
    from dlrun.runoptions import RUN_OPTIONS

    workload = inspect.Parameter("workload", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Workload)
    return [workload, *(typer_parameter(opt) for opt in RUN_OPTIONS)]


def takes_plan_options(command: Callable[..., None]) -> Callable[..., None]:
    """Give `command(own options..., **options)` the run options too; they arrive in `options`."""
    own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
           for p in inspect.signature(command, eval_str=True).parameters.values()
           if p.kind is not inspect.Parameter.VAR_KEYWORD]
    command.__signature__ = inspect.Signature([*plan_parameters(), *own])  # type: ignore[attr-defined]
    return command


def load_catalog():
    """The catalogs, with this machine as system `localhost` and its Python as image `host`."""
    from dlrun.catalog import load_catalog as load
    from dlrun.probe.host import probe_host

    return load(host=probe_host())


def default_system(catalog) -> str:
    """--system's default: $DLRUN_SYSTEM, else `system:` in config.yaml, else the system whose `hostnames`
    match this host's name, else localhost. A name from the environment or config must exist."""
    import socket

    from dlrun.config import config_file, site_config
    from dlrun.errors import unknown_name

    for where, name in (("$DLRUN_SYSTEM", os.environ.get("DLRUN_SYSTEM")),
                        (f"{config_file()} (key `system`)", site_config().get("system"))):
        if name:
            if str(name) not in catalog.systems:
                raise unknown_name(f"system in {where}", str(name), catalog.systems)
            return str(name)
    return catalog.system_for_host(socket.gethostname()) or "localhost"


def secret_env_specs(specs: list[str] | None, environ: dict[str, str]) -> tuple[list[str], list[str]]:
    """`--secret-env` values -> (NAME=VALUE entries for the plan's env, the names): a bare NAME takes its
    value from dlrun's environment, where it must be set."""
    from dlrun.errors import UsageError

    entries, names = [], []
    for spec in specs or []:
        name, sep, value = spec.partition("=")
        if not sep:
            if name not in environ:
                raise UsageError(f"--secret-env {name}: {name} is not set in dlrun's environment; valid: export "
                                 f"{name} first, or --secret-env {name}=VALUE")
            value = environ[name]
        entries.append(f"{name}={value}")
        names.append(name)
    return entries, names


def resolve(options: dict[str, Any], *, knob_decision=None, catalog=None):
    """Resolve a plan from a command's parameters (its `locals()` on entry), finished with this site's inputs:
    its images, dlrun's environment (secrets reused by --env), the store's matmul ceilings, and `knob_decision`
    (dlrun.tune.knob_decision: this machine's tuning) where given."""
    from dlrun.plan import resolve_plan

    kwargs = dict(options)
    entries, names = secret_env_specs(kwargs.pop("secret_env", None), dict(os.environ))
    kwargs["env"] = [*(kwargs.get("env") or []), *entries]
    catalog = catalog or load_catalog()
    kwargs["system"] = kwargs.get("system") or default_system(catalog)
    return resolve_plan(catalog, kwargs.pop("workload"), site=site_inputs(knob_decision), secret_env=names, **kwargs)


def site_inputs(knob_decision=None, store=None):
    """This site's inputs to a plan (dlrun.plan.finish.SiteInputs): the images it holds, dlrun's environment,
    the matmul ceilings in `store` (else the site's store, where there is one), a tuning decision."""
    from dlrun.images.verify import with_local_image
    from dlrun.plan import SiteInputs

    return SiteInputs(local_image=with_local_image, environ=dict(os.environ),
                      matmul_ceiling=store_ceilings(store), knob_decision=knob_decision)


def store_ceilings(store=None):
    """(system, dtype) -> the newest measured matmul rate in `store` (else the site's store), or None."""
    def lookup(system: str, dtype: str):
        from dlrun.measure import matmul_ceiling
        from dlrun.results.store import Store
        from dlrun.results.store.location import store_location

        found = store or Store(store_location())
        if not found.exists():
            return None
        return matmul_ceiling(found, system, dtype)
    return lookup
