"""The dlrun command line: thin; parses flags, calls the layers, prints with rich.

Heavy modules (pydantic catalogs, torch, docker) are imported inside commands so `dlrun --help` stays fast.
"""
from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from dlrun import __version__
from dlrun.errors import DlrunError

app = typer.Typer(
    name="dlrun",
    help="Run reference deep-learning workloads with pinned software stacks, like-for-like, on any system.\n\n"
         "Example: dlrun run resnet50 (or, as a shorthand, dlrun --image tf1.14-nccl --nodes 8 resnet50).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
images_app = typer.Typer(help="Container images: the pinned software stacks.", no_args_is_help=True)
workloads_app = typer.Typer(help="Workloads: models and their benchmark settings.", no_args_is_help=True)
systems_app = typer.Typer(help="Systems: site and machine profiles.", no_args_is_help=True)
results_app = typer.Typer(help="Stored results and their run directories.", no_args_is_help=True)
app.add_typer(images_app, name="images")
app.add_typer(workloads_app, name="workloads")
app.add_typer(systems_app, name="systems")
app.add_typer(results_app, name="results")


def _console(stderr: bool = False):
    from rich.console import Console

    console = Console(stderr=stderr, highlight=False)
    if not console.is_terminal:  # pipes and logs: do not squeeze tables into 80 columns
        console = Console(stderr=stderr, highlight=False, width=160)
    return console


def _fail(message: str, code: int) -> None:
    print(f"dlrun: error: {message}", file=sys.stderr)
    raise typer.Exit(code)


def handle_errors(func):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except DlrunError as exc:
            _fail(str(exc), exc.exit_code)
    return wrapper


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True, default=str))


# ----------------------------------------------------------------------------------------------- run / plan
Workload = Annotated[str, typer.Argument(help="Workload name (see `dlrun workloads list`).", show_default=False)]
ImageOpt = Annotated[Optional[str], typer.Option("--image", "-i", help="Image tag (default: the system's).")]
SystemOpt = Annotated[str, typer.Option("--system", "-s", help="System profile (see `dlrun systems list`).")]
NodesOpt = Annotated[Optional[int], typer.Option("--nodes", "-N", help="Number of nodes (default 1).")]
RanksOpt = Annotated[Optional[int], typer.Option("--ranks-per-node", "-r",
                                                 help="Ranks per node (default: GPUs per node, or 1 on CPU).")]
BatchOpt = Annotated[Optional[int], typer.Option("--batch-size", "-b", help="Batch size per rank.")]
GlobalBatchOpt = Annotated[Optional[int], typer.Option("--global-batch-size",
                                                       help="Total batch over all ranks (must divide evenly).")]
StepsOpt = Annotated[Optional[int], typer.Option("--steps", help="Timed training steps.")]
WarmupOpt = Annotated[Optional[int], typer.Option("--warmup-steps", help="Untimed warm-up steps before timing.")]
PrecisionOpt = Annotated[str, typer.Option("--precision", help="fp32 or amp (bf16 autocast on CPU, fp16 on GPU).")]
ThreadsOpt = Annotated[Optional[int], typer.Option("--threads", help="CPU threads per rank (default: cores/ranks).")]
LauncherOpt = Annotated[Optional[str], typer.Option("--launcher", help="Override the system's launcher.")]
RuntimeOpt = Annotated[Optional[str], typer.Option("--runtime", help="Override the container runtime.")]
SchedulerOpt = Annotated[Optional[str], typer.Option("--scheduler", help="Override the system's scheduler.")]
FabricOpt = Annotated[Optional[str], typer.Option("--fabric", help="Interconnect: ib, opa, roce or tcp.")]
DataOpt = Annotated[Optional[str], typer.Option("--data", help="Dataset directory, bound read-only at /data.")]
BindOpt = Annotated[Optional[list[str]], typer.Option("--bind", "-B", help="Extra bind SRC[:DST][:ro|rw] (repeatable).")]
EnvOpt = Annotated[Optional[list[str]], typer.Option("--env", "-e", help="Extra rank environment NAME=VALUE (repeatable).")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Print the exact script that would run; run nothing.")]
DataWorkersOpt = Annotated[Optional[int], typer.Option("--data-workers",
                                                      help="Data-loader workers per rank (default: the system's j).")]
AllocatorOpt = Annotated[str, typer.Option(
    "--allocator", help="Memory allocator of the PyTorch harness: auto (tcmalloc, else jemalloc, else glibc-tuned), "
    "tcmalloc, jemalloc, glibc-tuned or system.")]
PartitionOpt = Annotated[Optional[str], typer.Option("--partition", help="Batch partition/queue.")]
AccountOpt = Annotated[Optional[str], typer.Option("--account", help="Batch account/project.")]
TimeOpt = Annotated[Optional[str], typer.Option("--time", help="Job time limit: MINUTES, HH:MM:SS or D-HH:MM:SS.")]
ExclusiveOpt = Annotated[Optional[bool], typer.Option("--exclusive/--shared", help="Whole nodes (batch jobs).")]
LauncherArgOpt = Annotated[Optional[list[str]], typer.Option("--launcher-arg",
                                                             help="Extra launcher flag, passed as given (repeatable).")]
SkipChecksOpt = Annotated[bool, typer.Option("--skip-checks", help="Run even if the pre-launch checks refuse.")]


# `run` and `plan` take the same options; these are the ones whose CLI name differs from resolve_plan's.
_PLAN_NAMES = {"threads": "threads_per_rank", "data": "data_dir", "bind": "binds", "time": "time_limit",
               "launcher_arg": "launcher_args"}
_NOT_PLAN = {"skip_checks", "dry_run"}


def _resolve(options: dict[str, Any]):
    """Resolve a plan from a command's parameters (its `locals()` on entry)."""
    from dlrun.catalog import load_catalog
    from dlrun.plan import resolve_plan

    kwargs = {_PLAN_NAMES.get(name, name): value for name, value in options.items() if name not in _NOT_PLAN}
    return resolve_plan(load_catalog(), kwargs.pop("workload"), **kwargs)


@app.command()
@handle_errors
def run(workload: Workload, image: ImageOpt = None, system: SystemOpt = "localhost", nodes: NodesOpt = None,
        ranks_per_node: RanksOpt = None, batch_size: BatchOpt = None, global_batch_size: GlobalBatchOpt = None,
        steps: StepsOpt = None, warmup_steps: WarmupOpt = None, precision: PrecisionOpt = "fp32",
        threads: ThreadsOpt = None, launcher: LauncherOpt = None, runtime: RuntimeOpt = None,
        scheduler: SchedulerOpt = None, fabric: FabricOpt = None, data: DataOpt = None, bind: BindOpt = None,
        env: EnvOpt = None, data_workers: DataWorkersOpt = None, allocator: AllocatorOpt = "auto",
        partition: PartitionOpt = None,
        account: AccountOpt = None, time: TimeOpt = None, exclusive: ExclusiveOpt = None,
        launcher_arg: LauncherArgOpt = None, skip_checks: SkipChecksOpt = False, dry_run: DryRunOpt = False) -> None:
    """Run a workload: resolve a plan, render it, check it, execute it, store the result."""
    plan = _resolve(locals())
    from dlrun.render import render_job

    rendered = render_job(plan)
    from dlrun.doctor import preflight, refuse_on_errors

    if dry_run:
        for finding in preflight(plan):  # static: the profile's declared host MPI against the image
            if finding.level != "ok":
                print(f"dlrun: {finding.level}: {finding.line()}", file=sys.stderr)
        sys.stdout.write(rendered.script)
        return
    from dlrun.doctor import node_inventory

    inventory = node_inventory()
    findings = preflight(plan, inventory)
    if not skip_checks:
        refuse_on_errors(findings)
    for finding in findings:
        if finding.level == "warn" or (finding.level == "error" and skip_checks):
            print(f"dlrun: {finding.level}: {finding.line()}", file=sys.stderr)
    if plan.image.kind == "container":
        from dlrun.images.verify import verify_plan_image

        verify_plan_image(plan)  # refuses (exit 1) an image whose digest differs from containers/images.lock
    _execute(plan, rendered, inventory, findings)


def _execute(plan, rendered, inventory=None, findings=None) -> None:
    from dlrun.execute import execute
    from dlrun.paths import runs_dir, store_path
    from dlrun.results.store import Store

    console = _console()
    err = _console(stderr=True)
    title = (f"{plan.workload.name} ({plan.workload.label}) on {plan.system.name}: {plan.world_size} rank(s), "
             f"batch {plan.batch_size}/rank, {plan.warmup_steps}+{plan.steps} steps, {plan.precision}, "
             f"image {plan.image.name}")
    console.print(f"[bold]dlrun[/bold] {title}")

    def sink(stream: str, line: str) -> None:
        (err if stream == "stderr" else console).print(line, markup=False, highlight=False)

    with console.status("running…", spinner="dots"):
        record = execute(plan, rendered, runs_root=runs_dir(), store=Store(store_path()), sink=sink,
                         inventory=inventory, findings=findings)
    _print_summary(console, record)
    if record.status == "cancelled":
        raise typer.Exit(130)
    if record.status != "ok":
        _fail(f"run {record.id} {record.status}: {record.reason} (logs: {record.path})", 1)


def _print_summary(console, record) -> None:
    from rich.table import Table

    table = Table(title=f"run {record.id}: {record.status}", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    res = record.result or {}
    if res:
        extra = res.get("extra", {})
        if res["metric"] == "busbw":
            table.add_row("bus bandwidth", f"{res['value']:.3f} {res['unit']} at {extra.get('largest_bytes')} B "
                                           f"(average over sizes {extra.get('avg_busbw', 0):.3f})")
            table.add_row("formula", str(extra.get("formula", "")))
            table.add_row("backend", str(extra.get("backend")))
        else:
            table.add_row("throughput", f"{res['value']:.2f} {res['unit']} (all ranks)")
            table.add_row("formula", str(extra.get("formula", "")))
            rates = extra.get("per_rank_images_per_sec")
            if rates:
                table.add_row("per rank", ", ".join(f"{r:.2f}" for r in rates))
            table.add_row("model / batch", f"{res.get('model')} / {res.get('batch_size')} per rank")
        table.add_row("world size", str(res.get("num_devices")))
        table.add_row("framework", f"{extra.get('framework')} {extra.get('framework_version', '')}")
    if record.reason:
        table.add_row("reason", record.reason)
    table.add_row("run directory", str(record.path))
    console.print(table)


@app.command("plan")
@handle_errors
def plan_cmd(workload: Workload, image: ImageOpt = None, system: SystemOpt = "localhost", nodes: NodesOpt = None,
             ranks_per_node: RanksOpt = None, batch_size: BatchOpt = None,
             global_batch_size: GlobalBatchOpt = None, steps: StepsOpt = None, warmup_steps: WarmupOpt = None,
             precision: PrecisionOpt = "fp32", threads: ThreadsOpt = None, launcher: LauncherOpt = None,
             runtime: RuntimeOpt = None, scheduler: SchedulerOpt = None, fabric: FabricOpt = None,
             data: DataOpt = None, bind: BindOpt = None, env: EnvOpt = None, data_workers: DataWorkersOpt = None,
             allocator: AllocatorOpt = "auto", partition: PartitionOpt = None, account: AccountOpt = None,
             time: TimeOpt = None, exclusive: ExclusiveOpt = None, launcher_arg: LauncherArgOpt = None) -> None:
    """Print the resolved plan as JSON (what `run` would do, as data)."""
    _print_json(_resolve(locals()).summary())


# ----------------------------------------------------------------------------------------------- doctor
@app.command()
@handle_errors
def doctor(image: Annotated[Optional[str], typer.Option("--image", "-i", help="Check this image too.")] = None,
           system: Annotated[Optional[str], typer.Option("--system", "-s",
                                                         help="Check for this system profile.")] = None,
           as_json: Annotated[bool, typer.Option("--json", help="Machine-readable JSON output.")] = False) -> None:
    """Check this node before a run: inventory (CPU/NUMA, GPUs, fabrics, NICs, container runtimes, MPI/PMI,
    schedulers) and whether the system's launcher, runtime, fabric and the image's MPI fit together."""
    from dlrun.doctor import doctor_report

    report = doctor_report(_catalog(), system=system, image=image)
    errors = [c for c in report["checks"] if c["level"] == "error"]
    if as_json:
        _print_json(report)
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
                f"{cpu['logical_cpus']} logical; NUMA " + ", ".join(f"{n['node']}:{n['cpulist']}" for n in cpu['numa'])],
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
    _table("dlrun doctor", ["item", "value"], rows)


# ----------------------------------------------------------------------------------------------- catalogs
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON output.")]


def _catalog():
    from dlrun.catalog import load_catalog

    return load_catalog()


def _table(title: str, columns: list[str], rows: list[list[Any]]) -> None:
    from rich.table import Table

    table = Table(title=title)
    for index, column in enumerate(columns):
        table.add_column(column, no_wrap=index == 0)
    for row in rows:
        table.add_row(*("" if cell is None else str(cell) for cell in row))
    _console().print(table)


@images_app.command("list")
@handle_errors
def images_list(as_json: JsonOpt = False) -> None:
    """List images."""
    images = _catalog().images
    if as_json:
        _print_json([img.model_dump(mode="json") for img in images.values()])
        return
    _table("images", ["name", "kind", "arch", "framework", "description"],
           [[i.name, i.kind, ",".join(i.arch), f"{i.framework} {i.framework_version or ''}", i.description]
            for i in images.values()])


@workloads_app.command("list")
@handle_errors
def workloads_list(as_json: JsonOpt = False) -> None:
    """List workloads."""
    workloads = _catalog().workloads
    if as_json:
        _print_json([w.model_dump(mode="json") for w in workloads.values()])
        return
    _table("workloads", ["name", "model", "framework", "batch", "description"],
           [[w.name, w.label, w.framework, "-" if w.kind == "allreduce" else w.default_batch_size, w.description]
            for w in workloads.values()])


@workloads_app.command("show")
@handle_errors
def workloads_show(name: Annotated[str, typer.Argument(help="Workload name.")], as_json: JsonOpt = False) -> None:
    """Show a workload, with parameters and forward multiply-adds counted from the harness's own model."""
    from dlrun.workloads import describe_model

    workload = _catalog().workload(name)
    data = workload.model_dump(mode="json")
    if workload.kind == "allreduce":
        if as_json:
            _print_json(data)
            return
        _table(f"workload {workload.name}", ["field", "value"], [
            ["name", workload.name], ["description", workload.description], ["kind", workload.kind],
            ["framework", workload.framework],
            ["message sizes", f"{workload.min_bytes} B to {workload.max_bytes} B, x{workload.size_factor}"],
            ["iterations / warm-up per size", f"{workload.default_steps} / {workload.default_warmup_steps}"]])
        return
    data["model_facts"] = describe_model(workload.model)
    if as_json:
        _print_json(data)
        return
    facts = data["model_facts"]
    rows = [["name", workload.name], ["description", workload.description], ["model", workload.model],
            ["framework", workload.framework], ["default batch / steps / warm-up",
             f"{workload.default_batch_size} / {workload.default_steps} / {workload.default_warmup_steps}"],
            ["parameters", f"{facts['params'] / 1e6:.2f} M"],
            ["forward multiply-adds / image", f"{facts['forward_macs'] / 1e9:.3f} G"],
            ["input", "x".join(str(d) for d in facts["image_size"])]]
    for label, pub in (("published params", workload.published_params),
                       ("published ops / image", workload.published_ops_per_image)):
        if pub:
            rows.append([label, f"{pub.value:g} {pub.unit} ({pub.source.doc}, {pub.source.where})"])
    _table(f"workload {workload.name}", ["field", "value"], rows)


@systems_app.command("list")
@handle_errors
def systems_list(as_json: JsonOpt = False) -> None:
    """List systems."""
    systems = _catalog().systems
    if as_json:
        _print_json([s.model_dump(mode="json") for s in systems.values()])
        return
    _table("systems", ["name", "arch", "nodes", "GPUs/node", "scheduler", "runtime", "description"],
           [[s.name, s.arch, s.nodes, s.gpus_per_node, s.scheduler, s.runtime, s.description]
            for s in systems.values()])


@systems_app.command("show")
@handle_errors
def systems_show(name: Annotated[str, typer.Argument(help="System name.")], as_json: JsonOpt = False) -> None:
    """Show a system profile."""
    system = _catalog().system(name)
    data = system.model_dump(mode="json")
    if as_json:
        _print_json(data)
        return
    _table(f"system {system.name}", ["field", "value"],
           [[key, json.dumps(value) if isinstance(value, (dict, list)) else value] for key, value in data.items()])


# ----------------------------------------------------------------------------------------------- results
@results_app.command("list")
@handle_errors
def results_list(as_json: JsonOpt = False,
                 limit: Annotated[int, typer.Option("--limit", "-n", help="Newest N runs (0: all).")] = 50) -> None:
    """List stored runs, newest first."""
    from dlrun.paths import store_path
    from dlrun.results.store import Store

    if limit < 0:
        raise DlrunError(f"--limit must be >= 0, got {limit}", exit_code=2)
    runs = Store(store_path()).list_runs(limit or None)
    if as_json:
        _print_json(runs)
        return
    _table("results", ["id", "status", "workload", "system", "image", "ranks", "batch", "value"],
           [[r["id"], r["status"], r["workload"], r["system"], r["image"], r["world_size"],
             "-" if r["batch_size"] is None else r["batch_size"], f"{r['value']:.2f} {r['unit']}" if r["value"] is not None else "-"] for r in runs])


@results_app.command("show")
@handle_errors
def results_show(run_id: Annotated[str, typer.Argument(help="Run id (a unique prefix is enough).")],
                 as_json: JsonOpt = False) -> None:
    """Show one stored run with its results and provenance."""
    from dlrun.paths import store_path
    from dlrun.results.store import Store

    run = Store(store_path()).get_run(run_id)
    if as_json:
        _print_json(run)
        return
    rows = [[key, run[key]] for key in ("id", "status", "created_at", "workload", "model", "image", "image_digest",
                                        "system", "nodes", "ranks_per_node", "world_size", "batch_size",
                                        "precision", "run_dir")]
    for res in run["results"]:
        rows.append([res["metric"], f"{res['value']:.2f} {res['unit']}"])
    _table(f"run {run['id']}", ["field", "value"], rows)


@app.command("parse")
@handle_errors
def parse_cmd(file: Annotated[Path, typer.Argument(help="Log file (dlrun harness or tf_cnn_benchmarks output).")],
              as_json: JsonOpt = False) -> None:
    """Parse a benchmark log and print the extracted result."""
    from dlrun.results.parsers import parse_text

    try:
        text = file.read_text(errors="replace")
    except OSError as exc:
        raise DlrunError(f"cannot read {str(file)!r}: {exc.strerror}", exit_code=2) from None
    result = parse_text(text).to_dict()
    if as_json:
        _print_json(result)
        return
    _table(f"{file}", ["field", "value"],
           [[key, result[key]] for key in ("kind", "metric", "value", "unit", "model", "batch_size", "num_devices")])


def _version(value: bool) -> None:
    if value:
        print(f"dlrun {__version__}")
        raise typer.Exit()


@app.callback()
def main_callback(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                        help="Print the version and exit.")] = False) -> None:
    pass


# `dlrun images show|render|build|pull|push|save|load|verify|lock` (typer only at import; the rest inside).
from dlrun.images.cli import add_commands as _add_image_commands  # noqa: E402

_add_image_commands(images_app)

COMMANDS = {"run", "plan", "images", "workloads", "systems", "results", "parse", "doctor", "compare", "report",
            "reproduce"}
GLOBAL_FLAGS = {"--help", "-h", "--version"}


def normalise_argv(argv: list[str]) -> list[str]:
    """Accept the design card's form `dlrun --image tf1.14-nccl --nodes 8 resnet50` as `dlrun run ...`."""
    if not argv or argv[0] in COMMANDS or argv[0] in GLOBAL_FLAGS:
        return argv
    return ["run", *argv]


def main() -> None:
    # click's UsageError, whether typer vendors click (>= 0.20) or depends on it: BadParameter's base.
    ClickUsageError = typer.BadParameter.__mro__[1]
    argv = normalise_argv(sys.argv[1:])
    try:
        code = app(args=argv, prog_name="dlrun", standalone_mode=False)
    except ClickUsageError as exc:
        hint = ""
        if exc.ctx is not None:
            hint = f" (see '{exc.ctx.command_path} --help')"
        print(f"dlrun: error: {exc.format_message()}{hint}", file=sys.stderr)
        sys.exit(2)
    except typer.Abort:
        sys.exit(130)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
