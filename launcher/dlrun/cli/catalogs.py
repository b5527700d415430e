"""`dlrun workloads|systems list|show`, `dlrun systems init` (a site's profile drafted from the scheduler and
this node: dlrun.systeminit) and `dlrun schema`: the catalogs as tables, JSON and JSON Schema."""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from dlrun.cli.options import JsonOpt, load_catalog
from dlrun.cli.output import fields_table, handle_errors, print_json, table, warn

if TYPE_CHECKING:  # the catalog's models are imported by the commands that read it: not at start-up (0.3 s)
    from dlrun.catalog.models import WorkloadSpec

workloads_app = typer.Typer(help="Workloads: models and their benchmark settings.", no_args_is_help=True)
systems_app = typer.Typer(help="Systems: site and machine profiles.", no_args_is_help=True)


@workloads_app.command("list")
@handle_errors
def workloads_list(as_json: JsonOpt = False) -> None:
    """List workloads."""
    workloads = load_catalog().workloads
    if as_json:
        print_json([w.model_dump(mode="json") for w in workloads.values()])
        return
    table("workloads", ["name", "model", "framework", "batch", "description"],
          [[w.name, w.label, _frameworks(w), w.default_batch_size if w.trains or w.command else "-", w.description]
           for w in workloads.values()])


def _frameworks(workload: WorkloadSpec) -> str:
    """The workload's framework, plus TensorFlow 2 where dlrun's TF harness has its model (image host-tf)."""
    from dlrun.catalog.models import TF2_HARNESS_MODELS

    if workload.kind == "command":
        return "the site's own command"
    return workload.framework + (", tensorflow 2" if workload.trains and workload.model in TF2_HARNESS_MODELS
                                 else "")


def _show_command(workload: WorkloadSpec, data: dict, as_json: bool) -> None:
    """A site's own command: what runs, where, and how its result is read."""
    if as_json:
        print_json(data)
        return
    result = workload.result
    reads = (f"regex {result.regex!r}: {result.metric} in {result.unit}, {result.direction} is better"
             if result and result.format == "regex" else f"parser {result.format if result else '?'}")
    fields_table(f"workload {workload.name}", [
        ["name", workload.name], ["description", workload.description], ["kind", workload.kind],
        ["command", str(workload.command)], ["runs", f"once per {workload.run_per}"], ["result", reads],
        ["default batch / steps / warm-up",
         f"{workload.default_batch_size} / {workload.default_steps} / {workload.default_warmup_steps}"]])


@workloads_app.command("show")
@handle_errors
def workloads_show(name: Annotated[str, typer.Argument(help="Workload name.")], as_json: JsonOpt = False) -> None:
    """Show a workload, with parameters and forward multiply-adds counted from the harness's own model."""
    from dlrun.harness import describe_model

    workload = load_catalog().workload(name)
    data = workload.model_dump(mode="json")
    if workload.kind == "command":
        _show_command(workload, data, as_json)
        return
    if not workload.trains:
        if as_json:
            print_json(data)
            return
        what = ([["reads", f"{workload.storage_test} read of the files under --data (the harness's storage reader)"],
                 ["timed / warm-up passes", f"{workload.default_steps} / {workload.default_warmup_steps}"]]
                if workload.kind == "storage" else
                [["message sizes", f"{workload.min_bytes} B to {workload.max_bytes} B, x{workload.size_factor}"],
                 ["iterations / warm-up per size", f"{workload.default_steps} / {workload.default_warmup_steps}"]])
        fields_table(f"workload {workload.name}", [
            ["name", workload.name], ["description", workload.description], ["kind", workload.kind],
            ["framework", workload.framework], *what])
        return
    data["model_facts"] = describe_model(workload.model)
    if as_json:
        print_json(data)
        return
    facts = data["model_facts"]
    per = facts.get("forward_macs_per", "image")
    shape = ("x".join(str(d) for d in facts["image_size"]) if "image_size" in facts
             else f"{facts.get('seq_length')} tokens" + (f", {facts['sequences_per_instance']} sequences per instance"
                                                          if facts.get("sequences_per_instance", 1) > 1 else ""))
    rows = [["name", workload.name], ["description", workload.description], ["model", workload.model],
            ["framework", _frameworks(workload)], ["default batch / steps / warm-up",
             f"{workload.default_batch_size} / {workload.default_steps} / {workload.default_warmup_steps}"],
            ["parameters", f"{facts['params'] / 1e6:.2f} M"],
            [f"forward multiply-adds / {per}", f"{facts['forward_macs'] / 1e9:.3f} G"],
            ["input", shape]]
    for label, pub in (("published params", workload.published_params),
                       (f"published ops / {per}", workload.published_ops_per_image)):
        if pub:
            rows.append([label, f"{pub.value:g} {pub.unit} ({pub.source.doc}, {pub.source.where})"])
    fields_table(f"workload {workload.name}", rows)


@systems_app.command("list")
@handle_errors
def systems_list(as_json: JsonOpt = False) -> None:
    """List systems."""
    systems = load_catalog().systems
    if as_json:
        print_json([s.model_dump(mode="json") for s in systems.values()])
        return
    table("systems", ["name", "arch", "nodes", "GPUs/node", "scheduler", "runtime", "description"],
          [[s.name, s.arch, s.nodes, s.gpus_per_node, s.scheduler, s.runtime, s.description]
           for s in systems.values()])


@systems_app.command("show")
@handle_errors
def systems_show(name: Annotated[str, typer.Argument(help="System name.")], as_json: JsonOpt = False) -> None:
    """Show a system profile."""
    system = load_catalog().system(name)
    data = system.model_dump(mode="json")
    if as_json:
        print_json(data)
        return
    fields_table(f"system {system.name}",
                 [[key, json.dumps(value) if isinstance(value, (dict, list)) else value] for key, value in data.items()])


@systems_app.command("init")
@handle_errors
def systems_init(
    name: Annotated[str, typer.Argument(help="Name of the new system (its file: ~/.config/dlrun/systems/NAME.yaml).")],
    partition: Annotated[Optional[str], typer.Option(
        "--partition", help="The scheduler's partition the system's own facts describe (default: the default "
        "partition); every other partition with nodes becomes an entry of its `partitions`.",
        show_default=False)] = None,
    scheduler: Annotated[Optional[str], typer.Option(
        "--scheduler", help="Ask this scheduler's tools (default: the first whose tools answer here; none: "
        "this node alone).", show_default=False)] = None,
    out: Annotated[Optional[Path], typer.Option(
        "--out", help="Write the profile here instead.", show_default=False)] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing file (its diff is shown).")] = False,
    show: Annotated[bool, typer.Option("--print", help="Print the profile; write nothing.")] = False,
) -> None:
    """Draft a system profile for this site from what can be seen here: the scheduler's nodes and partitions
    (Slurm: scontrol show node, sinfo; LSF: lshosts, bhosts, bqueues, bmgroup; PBS: pbsnodes, qstat; queues as
    partitions), each other partition an entry of
    the profile's `partitions`, and this node's probes (CPUs, memory, GPUs, fabrics). Every value says
    where it comes from; what no probe can tell is left as a commented line to set. An existing file is
    shown as a diff and replaced only with --force."""
    from dlrun.paths import config_home
    from dlrun.systeminit.run import draft

    path = out if out is not None else config_home() / "systems" / f"{name}.yaml"
    drafted = draft(name, path, partition=partition, scheduler=scheduler)
    if show:
        print(drafted.text, end="")
        return
    _write_draft(drafted, force)


def _write_draft(drafted, force: bool) -> None:
    from dlrun.files import write_atomic
    from dlrun.text import plain

    unknown = sum("not known: set it" in line for line in drafted.text.splitlines()[3:])  # after the header
    if drafted.old is not None:
        if drafted.old == drafted.text:
            print(f"{plain(str(drafted.path))}: unchanged")
            return
        print(drafted.diff, end="")
        if not force:
            warn(f"not written: {drafted.path} exists; --force replaces it with the draft (the diff above)")
            return
    drafted.path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(drafted.path, drafted.text)
    print(f"wrote {plain(str(drafted.path))}: system {drafted.spec.name}, {drafted.spec.nodes} node(s), scheduler "
          f"{drafted.spec.scheduler}; {unknown} value(s) not known: set them (the commented lines)")


SCHEMA_KINDS = ("images", "workloads", "systems")


@handle_errors
def schema(kind: Annotated[str, typer.Argument(help="images, workloads or systems.", show_default=False)]) -> None:
    """Print the JSON Schema of a catalog's YAML entries (for an editor's YAML language server)."""
    from dlrun.catalog.models import WorkloadSpec
    from dlrun.catalog.schema import system_json_schema
    from dlrun.catalog.stack import PinnedImageSpec
    from dlrun.errors import unknown_name

    schemas = {"images": PinnedImageSpec.model_json_schema, "workloads": WorkloadSpec.model_json_schema,
               "systems": system_json_schema}  # a system's scheduler_options: its scheduler's own
    if kind not in schemas:
        raise unknown_name("catalog", kind, SCHEMA_KINDS)
    document = schemas[kind]()
    document["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    document["title"] = f"dlrun {kind[:-1]} catalog entry"
    print_json(document)
