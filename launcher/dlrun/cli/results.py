"""`dlrun results list|show` and `dlrun parse`: stored runs, and results read from any benchmark log; `results
export|import|import-log` live in results_share."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from dlrun.cli import results_share
from dlrun.cli.filters import (ExperimentFilter, ImageFilter, SinceFilter, SiteFilter, StatusFilter, SystemFilter,
                               WorkloadFilter, build_filters)
from dlrun.cli.options import JsonOpt
from dlrun.cli.output import fields_table, handle_errors, print_json, table
from dlrun.cli.store import open_store
from dlrun.errors import UsageError

results_app = typer.Typer(help="Stored results and their run directories.", no_args_is_help=True)
results_app.command("export")(results_share.export)
results_app.command("import")(results_share.import_)
results_app.command("import-log")(results_share.import_log)
results_app.command("copy")(results_share.copy)


@results_app.command("list")
@handle_errors
def results_list(as_json: JsonOpt = False,
                 limit: Annotated[int, typer.Option("--limit", "-n", help="Newest N runs (0: all).")] = 50,
                 workload: WorkloadFilter = None, system: SystemFilter = None, image: ImageFilter = None,
                 status: StatusFilter = None, since: SinceFilter = None, experiment: ExperimentFilter = None,
                 site: SiteFilter = None) -> None:
    """List stored runs, newest first (filters: any of the values of one option, all options together)."""
    if limit < 0:
        raise UsageError(f"--limit must be >= 0, got {limit}")
    store = open_store()
    filters = build_filters(store, workload=workload, system=system, image=image, status=status, since=since,
                            experiment=experiment, site=site)
    runs = store.list_runs(limit or None, filters)
    if as_json:
        print_json(runs)
        return
    if not runs:  # an empty answer to a valid question (a catalog's name with no run yet): exit 0
        given = [f"--{name.replace('_', '-')} {value}" for name, values in filters.active().items() for value in values]
        given += [f"--since {since}"] if since else []
        print(f"no runs match {' '.join(given)}" if given else "no runs stored yet (`dlrun run WORKLOAD` stores one)")
        return
    table("results", ["id", "status", "workload", "system", "site", "image", "ranks", "batch", "value", "quality"],
          [[r["id"], r["status"], r["workload"], r["system"], r["site"], r["image"], r["world_size"],
            "-" if r["batch_size"] is None else r["batch_size"],
            f"{r['value']:.2f} {r['unit']}" if r["value"] is not None else "-", r.get("verdict") or "unknown"]
           for r in runs])


def _rank_rows(extra: dict) -> list[list[str]]:
    """The rank the others waited for, and each rank's median step, where the harness timed its ranks."""
    slowest, steps = extra.get("slowest_rank"), extra.get("per_rank_step_p50_s")
    if not isinstance(slowest, dict) or not isinstance(slowest.get("ratio"), (int, float)):
        return []
    what = "time until ready to communicate" if slowest.get("figure") == "ready" else "step time"
    rows = [["slowest rank", f"rank {slowest.get('rank')} on {slowest.get('host')} ({slowest.get('device')}): "
             f"{slowest['ratio']:.2f}× the other ranks' median {what}"]]
    if isinstance(steps, list) and all(isinstance(v, (int, float)) for v in steps):
        rows.append(["median step per rank", ", ".join(f"{v * 1000:.1f}" for v in steps[:16])
                     + " ms" + (f" (and {len(steps) - 16} more ranks)" if len(steps) > 16 else "")])
    return rows


@results_app.command("show")
@handle_errors
def results_show(run_id: Annotated[str, typer.Argument(help="Run id (a unique prefix is enough).")],
                 as_json: JsonOpt = False) -> None:
    """Show one stored run with its results, provenance, machine (hardware fingerprint), quality verdict and
    comparability key (--json: `fingerprint`, `quality.verdict`, `quality.reasons`, `key`)."""
    run = open_store().get_run(run_id)
    if as_json:
        print_json(run)
        return
    rows = [[key, run[key]] for key in ("id", "status", "created_at", "workload", "model", "image", "image_digest",
                                        "system", "site", "origin", "experiment", "point", "nodes",
                                        "ranks_per_node", "world_size", "batch_size", "precision", "run_dir",
                                        "key_hash")]
    rows[rows.index(["origin", run["origin"]]) + 1:1] = bundle_rows(run["provenance"].get("bundle"))
    for res in run["results"]:
        rows.append([res["metric"], f"{res['value']:.2f} {res['unit']}"])
        if res.get("value_is"):  # which printed figure it is (results stored before dlrun said so have none)
            rows.append([f"{res['metric']} is", res["value_is"]])
        per_device = (res.get("extra") or {}).get("tokens_per_sec_per_device")
        if res["metric"] == "throughput" and isinstance(per_device, (int, float)):
            rows.append(["throughput per device", f"{per_device:.2f} tokens/sec (all devices' rate / devices)"])
        rows += _rank_rows(res.get("extra") or {})
    from dlrun.results.fingerprint import describe
    from dlrun.results.key import KEY_FIELDS
    from dlrun.telemetry.show import telemetry_rows

    rows += telemetry_rows(run["provenance"].get("telemetry"))

    rows += [[f"machine: {label}", text] for label, text in describe(run.get("fingerprint"))]
    quality = run.get("quality") or {}
    rows.append(["quality", quality.get("verdict", "unknown")])
    rows += [["quality: why", reason] for reason in quality.get("reasons") or []]
    for name in KEY_FIELDS if run["key"] else ():  # what decides the value: compared by `dlrun compare`
        rows.append([f"key: {name}", run["key"].get(name)])
    fields_table(f"run {run['id']}", rows)


def bundle_rows(bundle) -> list[list[str]]:
    """Where an imported run came from: the bundle's site, who signed it and whether that was verified."""
    if not isinstance(bundle, dict):
        return []
    if bundle.get("verified") and bundle.get("signer"):
        signed = f"signed by {bundle['signer']}, verified against the allowed signers"
    elif bundle.get("signed"):
        signed = "signed, but not verified (no allowed-signers file was given): nobody vouched for it"
    else:
        signed = "unsigned: nobody vouched for it"
    return [["imported from", f"a bundle of site {bundle.get('site')} (sha256 {str(bundle.get('sha256'))[:12]}...), "
                              f"{signed}; imported {bundle.get('imported_at')}"]]


@results_app.command("delete")
@handle_errors
def results_delete(
        run_ids: Annotated[Optional[list[str]], typer.Argument(
            help="Run ids (unique prefixes are enough); with filters, runs must match both.",
            show_default=False)] = None,
        yes: Annotated[bool, typer.Option("--yes", "-y", help="Delete without asking (for scripts).")] = False,
        workload: WorkloadFilter = None, system: SystemFilter = None, image: ImageFilter = None,
        status: StatusFilter = None, since: SinceFilter = None, experiment: ExperimentFilter = None,
        site: SiteFilter = None) -> None:
    """Delete stored runs and the run directories dlrun made for them (undo an import: --site SITE)."""
    import sys

    from dlrun.paths import dlrun_home
    from dlrun.results.store.delete import delete_runs

    if not run_ids and not any((workload, system, image, status, since, experiment, site)):
        raise UsageError("name the runs to delete; valid: run ids, or filters such as --site SITE or --since 1d")
    store = open_store()
    filters = build_filters(store, run_ids, workload=workload, system=system, image=image, status=status, since=since,
                            experiment=experiment, site=site)
    runs = store.list_runs(None, filters)
    if not runs:
        raise UsageError("no stored run matches; nothing deleted")
    what = f"{len(runs)} stored run{'s' if len(runs) != 1 else ''}"
    if not yes:
        if not sys.stdin.isatty():
            raise UsageError(f"deleting {what} needs a yes: answer in a terminal, or give --yes")
        table("to delete", ["id", "status", "workload", "system", "site"],
              [[r["id"], r["status"], r["workload"], r["system"], r["site"]] for r in runs[:20]])
        if not typer.confirm(f"delete {what} and their run directories?", default=False):
            print("nothing deleted")
            raise typer.Exit(1)
    done = delete_runs(store, runs, dlrun_home())
    print(f"deleted {len(done.runs)} run{'s' if len(done.runs) != 1 else ''} and {len(done.directories)} run "
          f"director{'ies' if len(done.directories) != 1 else 'y'}")


@handle_errors
def parse(file: Annotated[Path, typer.Argument(help="Log file: dlrun harness, nccl-tests, tf_cnn_benchmarks, "
                                                   "Horovod, dllogger (DeepLearningExamples) or MLPerf output.")],
          as_json: JsonOpt = False) -> None:
    """Parse a benchmark log and print the extracted result, which printed figure it is (value_is) and
    anything that makes it untrustworthy (problems)."""
    from dlrun.results.exchange.import_log import read_log
    from dlrun.results.parsers import parse_text

    text, _ = read_log(file)  # regular files only, at most limits.log_bytes
    result = parse_text(text).to_dict()
    if as_json:
        print_json(result)
        return
    rows = [[key, result[key]] for key in ("kind", "metric", "value", "unit", "value_is", "model", "batch_size",
                                            "num_devices")]
    rows += [["problem", problem] for problem in result["problems"]]
    fields_table(f"{file}", rows)
