"""What `dlrun reproduce` and `dlrun experiments show` print: points as tables (settings, what the store holds,
why a point is skipped), rendered scripts (whole, or the first whole and the others as the lines in which
they differ), the live display of a run, and the results against the published numbers."""
from __future__ import annotations

import difflib
from typing import Any

from dlrun.cli.output import console, table
from dlrun.cli.progress import STEP_ROW
from dlrun.text import plain

POINT_COLUMNS = ["point", "workload", "image", "nodes x ranks", "launcher", "batch/rank", "steps (warm-up+timed)",
                 "precision", "fabric", "runs stored/wanted"]
FACTS_COLUMNS = ["point", "workload", "model (harness)", "counted by", "runs stored/wanted"]


def _system_title(experiment, system: str | None, works: list) -> str:
    skipped = sum(1 for w in works if w.skip)
    where = f"on {system}" if system else "(model facts, on no system)"
    return (f"{experiment.id} {where}: {len(works)} point(s), {len(works) - skipped} to run, {skipped} skipped; "
            f"{sum(w.missing for w in works)} run(s) missing from the store")


def _numbered(work) -> str:
    return f"{work.point.index + 1}. {work.id}"


def work_row(work) -> list[Any]:
    stored = f"{len(work.stored)}/{work.repeats}"
    if work.facts is not None:
        return [_numbered(work), work.point.workload, work.facts["model"], work.facts["harness"], stored]
    plan = work.plan
    return [_numbered(work), plan.workload.name, plan.image.name, f"{plan.nodes} x {plan.ranks_per_node}",
            plan.launcher, "-" if not plan.workload.trains else plan.batch_size, f"{plan.warmup_steps}+{plan.steps}",
            plan.precision, plan.fabric, stored]


def print_skipped(works: list) -> None:
    """Skipped points grouped by reason (a status-wide reason is said once, not once per point)."""
    by_reason: dict[str, list] = {}
    for work in works:
        if work.skip:
            by_reason.setdefault(work.skip, []).append(work)
    if by_reason:
        table(f"skipped ({sum(len(group) for group in by_reason.values())})", ["point(s)", "why"],
              [["\n".join(_numbered(w) for w in group), reason] for reason, group in by_reason.items()])


def print_dry_run(experiment, systems: list, *, scripts: bool) -> None:
    out = console()
    if not systems:
        out.print(f"[bold]{experiment.id}[/bold] names no system to run on: {experiment.status.kind}: "
                  f"{experiment.status.reason}")
    for system_work in systems:
        works = system_work.works
        runnable = [w for w in works if not w.skip]
        title = _system_title(experiment, system_work.system, works)
        if runnable and runnable[0].facts is not None:
            table(title, FACTS_COLUMNS, [work_row(w) for w in runnable])
        elif runnable:
            first = runnable[0].plan
            table(title + f" | scheduler {first.scheduler}, runtime {first.runtime}",
                  POINT_COLUMNS, [work_row(w) for w in runnable])
        else:
            out.print(f"[bold]{title}[/bold]")
        print_skipped(works)
        with_scripts = [w for w in runnable if w.rendered is not None]
        if with_scripts:
            print_scripts(with_scripts, whole=scripts)


def print_scripts(works: list, *, whole: bool) -> None:
    """Every script whole, or the first whole and each other as its differences from the first."""
    first = works[0]
    for work in works if whole else works[:1]:
        print(f"# ----- point {work.point.index + 1}: {work.id} ({work.system}): {work.rendered.submit_argv[0]} run.sh")
        print(work.rendered.script, end="" if work.rendered.script.endswith("\n") else "\n")
    if whole or len(works) == 1:
        return
    base = first.rendered.script.splitlines()
    for work in works[1:]:
        lines = [line for line in difflib.unified_diff(base, work.rendered.script.splitlines(), lineterm="", n=0)
                 if line[:1] in "+-" and not line.startswith(("+++", "---"))]
        print(f"# ----- point {work.point.index + 1}: {work.id}: differs from point {first.point.index + 1} in")
        print("\n".join(lines) if lines else "# (nothing: the same script)")
    print(f"# (whole scripts of all {len(works)} points: add --script)")


def dry_run_json(experiment, systems: list) -> dict[str, Any]:
    return {"experiment": experiment.id, "status": experiment.status.model_dump(mode="json"), "systems": [
        {"system": sw.system, "points": [{
            "index": w.point.index, "id": w.id, "point": w.point.as_dict(), "skip": w.skip, "repeats": w.repeats,
            "stored": len(w.stored), "missing": w.missing, "key": w.key,
            "plan": w.plan.summary() if w.plan is not None else w.facts,
            "script": w.rendered.script if w.rendered is not None else None} for w in sw.works]}
        for sw in systems]}


def points_of_catalog(points: list, system: str | None) -> None:
    """`dlrun experiments show NAME`: the expanded points of one system, as the catalog decides them."""
    rows = [[p.index + 1, p.label(), p.workload or "-", p.image or "-",
             f"{p.nodes} x {p.ranks_per_node}" if p.nodes else "-", p.gpus or "-", p.batch_per_device or "-",
             p.precision if system else "-", p.fabric or "-", p.repeats, p.skip or ""] for p in points]
    table(f"points on {system or 'no system (model facts)'}: {len(points)}",
          ["#", "point", "workload", "image", "nodes x ranks", "GPUs", "batch/device", "precision", "fabric",
           "repeats", "skipped because"], rows)


class ReproduceDisplay:
    """The live view of a reproduce run: a line per run as it starts and ends (point k of n, repeat r of R),
    and at the bottom the current run's progress (step, rate) and the whole reproduce's."""

    def __init__(self, total: int, verbose: bool = False, stderr: bool = False, follow_steps: bool = True):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn

        self.verbose = verbose
        self.follow_steps = follow_steps  # one run at a time: its steps; batch jobs run side by side: none
        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TextColumn("{task.fields[rate]}"), console=console(stderr=stderr),
                                 transient=True)
        self.overall = self.progress.add_task("runs", total=total, rate="")
        self.current = None

    def __enter__(self) -> "ReproduceDisplay":
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def _say(self, text: str) -> None:
        self.progress.console.print(plain(text, newlines=False), markup=False, highlight=False)

    def starting(self, step):
        work = step.work
        what = (f"{work.plan.workload.name}, {work.plan.world_size} rank(s) on {work.plan.system.name}"
                if work.plan is not None else f"counting {work.facts['model']}")
        self._say(f"point {step.point_index}/{step.points}, repeat {step.repeat}/{work.repeats} "
                  f"(run {step.index}/{step.total}): {work.id}: {what}")
        if not self.follow_steps:
            return lambda stream, line: self._line(step, None, stream, line)
        if self.current is not None:
            self.progress.remove_task(self.current)
        total = work.plan.steps if work.plan is not None and work.plan.workload.trains else None
        self.current = self.progress.add_task(f"  point {step.point_index}/{step.points} "
                                              f"repeat {step.repeat}/{work.repeats}: starting", total=total, rate="")
        return lambda stream, line: self._line(step, total, stream, line)

    def _line(self, step, total: int | None, stream: str, line: str) -> None:
        row = STEP_ROW.match(line)
        if row and total and self.current is not None:
            done = int(row.group("step"))
            self.progress.update(self.current, completed=min(done, total),
                                 description=f"  point {step.point_index}/{step.points} repeat {step.repeat}/"
                                             f"{step.work.repeats}: step {done}/{total}",
                                 rate=f"{float(row.group('rate')):.1f} {row.group('unit')}/s")
        if self.verbose or line.startswith("dlrun: submitted"):  # the job's own lines stay in its run directory
            self._say(f"  {line}")

    def finished(self, outcome) -> None:
        self.progress.advance(self.overall)
        values = ", ".join(f"{metric} {value:,.4g}" for metric, value in outcome.values.items())
        unit = f" {outcome.unit}" if outcome.unit else ""
        step = outcome.step  # batch runs end in any order: say which one ended
        which = "" if self.follow_steps else f"point {step.point_index}/{step.points}, repeat {step.repeat}: "
        if outcome.status == "ok":
            self._say(f"  {which}ok: {values}{unit} (run {outcome.run_id})")
        else:
            self._say(f"  {which}{outcome.status}: {outcome.reason} (run {outcome.run_id}, logs: {outcome.path})")


def number(value: float) -> str:
    """Counts in full (61,100,840), rates to five digits (1,234.5)."""
    return f"{value:,.0f}" if abs(value) >= 1e5 else f"{value:,.5g}"


def print_points(experiment, system_work, summaries: list[dict[str, Any]]) -> None:
    rows = []
    for summary in summaries:
        runs = f"{summary['runs']}/{summary['repeats']}"
        for metric, stats in summary["metrics"].items():
            rows.append([summary["point"], runs, metric, "-" if stats["geomean"] is None else number(stats["geomean"]),
                         f"{number(stats['min'])} .. {number(stats['max'])}", stats["unit"]])
        if not summary["metrics"]:
            rows.append([summary["point"], runs, "-", "-", "-", ""])
    where = f" on {system_work.system}" if system_work.system else ""
    table(f"{experiment.id}{where}: stored results per point", ["point", "runs", "metric", "geo. mean", "range",
                                                                   "unit"], rows)


def print_references(rows: list) -> None:
    """Published against measured: one row per reference, its source (where, quote) next to the value."""
    if not rows:
        return
    cells = []
    for row in rows:
        ref = row.reference
        measured = "-" if row.measured is None else number(row.measured) + (f" {row.unit}" if row.unit else "")
        if row.ci is not None:
            measured += f" [{number(row.ci[0])}, {number(row.ci[1])}]"
        elif row.interval.startswith("too few repeats"):
            measured += " (too few repeats for an interval)"
        note = "point skipped (see above)" if row.verdict == "skipped" else row.why
        cells.append([ref.id, "; ".join(row.points), row.published, measured,
                      "-" if row.ratio is None else f"{row.ratio:.4f}", row.verdict + (f": {note}" if note else ""),
                      f"{ref.source.where}: \"{ref.source.quote}\""])
    table(f"against the published numbers ({rows[0].reference.source.doc})",
          ["reference", "point(s)", "published", "measured [95 % CI]", "ratio", "verdict", "source"], cells)
    console().print("[dim]measured: geometric mean of the runs (a derived quantity: from the ratio of geometric "
                    "means), 95 % CI from t on logs; within: the CI inside the tolerance band; outside: wholly "
                    "outside it; else inconclusive[/]", highlight=False)


def references_json(rows: list) -> list[dict[str, Any]]:
    return [{"reference": row.reference.id, "metric": row.reference.metric, "points": row.points,
             "published": row.published, "value": row.reference.value,
             "range": list(row.reference.range) if row.reference.range else None, "unit": row.reference.unit,
             "measured": row.measured, "measured_ci": list(row.ci) if row.ci else None, "measured_unit": row.unit,
             "interval": row.interval, "runs": row.runs, "ratio": row.ratio,
             "verdict": row.verdict, "repeats_needed": row.repeats_needed, "why": row.why,
             "source": row.reference.source.model_dump(mode="json")} for row in rows]
