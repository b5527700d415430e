"""What a running job looks like on the terminal: its lines as they come (rank 0's, and stderr), a live
progress line at the bottom (step, throughput, ETA) built from rank 0's step rows, and the summary table.
The raw `DLRUN_RESULT {json}` line stays in the run directory unless `--verbose`."""
from __future__ import annotations

import re
from typing import Any

from dlrun.cli.output import console
from dlrun.harness.harness_result_schema import RESULT_PREFIX
from dlrun.text import for_rich, plain

# tf_cnn_benchmarks' step row, which dlrun's harness prints too: `10\timages/sec: 12.3 +/- 0.1 (jitter = ...)`
STEP_ROW = re.compile(r"^(?:\[\d+,0\]<std\w+>:)?\s*(?P<step>\d+)\s+(?P<unit>\w+)/sec:\s*(?P<rate>[0-9.]+)")
TAG = re.compile(r"^\[\d+,\d+\]<std\w+>:\s?")
#: How often the progress line is redrawn on a terminal between the job's lines.
REDRAWS_PER_S = 2


class RunDisplay:
    """A context manager whose `sink(stream, line)` the executor calls for every line of the job."""

    def __init__(self, plan: Any, verbose: bool = False):
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeRemainingColumn

        from dlrun.secrets import plan_redactor

        self.redact = plan_redactor(plan)
        self.verbose = verbose
        self.out = console()
        self.err = console(stderr=True)
        self.total = plan.steps if plan.workload.trains else None
        # redrawn twice a second on a terminal, and only when a line comes elsewhere: rich's default, ten
        # redraws a second from a thread of its own, took 5 ms of CPU a second from the job's CPUs
        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                 TextColumn("{task.fields[rate]}"), TimeRemainingColumn(),
                                 console=self.out, transient=True, auto_refresh=self.out.is_terminal,
                                 refresh_per_second=REDRAWS_PER_S)
        self.task = self.progress.add_task(f"{plan.workload.name}: warming up", total=self.total, rate="")

    def __enter__(self) -> "RunDisplay":
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def sink(self, stream: str, line: str) -> None:
        body = TAG.sub("", line)
        if body.startswith(RESULT_PREFIX) and not self.verbose:
            return
        row = STEP_ROW.match(line)
        if row and self.total:
            step = int(row.group("step"))
            self.progress.update(self.task, completed=min(step, self.total),
                                 description=f"step {step}/{self.total} (rank 0)",
                                 rate=f"{float(row.group('rate')):.1f} {row.group('unit')}/s")
        target = self.err if stream == "stderr" else self.out
        line = plain(self.redact(line), newlines=False)  # a rank's output: no escape sequences, no secret values
        if self.progress.live.is_started and target is self.out:
            self.progress.console.print(line, markup=False, highlight=False)
        else:
            target.print(line, markup=False, highlight=False)


def summary_rows(record: Any) -> list[list[str]]:
    rows: list[list[str]] = []
    res = record.result or {}
    if res:
        extra = res.get("extra", {})
        if extra.get("command_workload"):  # a site's own command: its figure and which printed figure it is
            better = "lower" if extra.get("direction") == "lower" else "higher"
            rows.append([res["metric"], f"{res['value']:.6g} {res['unit']} ({better} is better)"])
            rows.append(["value is", str(res.get("value_is", ""))])
        elif extra.get("benchmark") == "storage":
            rows += storage_rows(res, extra)
        elif res["metric"] == "busbw":
            rows.append(["bus bandwidth", f"{res['value']:.3f} {res['unit']} at {extra.get('largest_bytes')} B "
                                          f"(average over sizes {extra.get('avg_busbw', 0):.3f})"])
            rows.append(["formula", str(extra.get("formula", ""))])
            rows.append(["backend", str(extra.get("backend"))])
        else:
            rows.append(["throughput", f"{res['value']:.2f} {res['unit']} (all ranks)"])
            rows.append(["formula", str(extra.get("formula", ""))])
            rates = extra.get("per_rank_images_per_sec") or extra.get("per_rank_sequences_per_sec")
            if rates:
                rows.append(["per rank", ", ".join(f"{r:.2f}" for r in rates)])
            rows.append(["model / batch", f"{res.get('model')} / {res.get('batch_size')} per rank"])
            rows += mfu_rows(extra)
            rows += precision_rows(extra.get("precision"), extra) + knob_rows(extra.get("knobs"))
        rows.append(["world size", str(res.get("num_devices"))])
        rows += arch_rows(extra)
        if not extra.get("command_workload") and extra.get("benchmark") != "storage":
            rows.append(["framework", f"{extra.get('framework')} {extra.get('framework_version', '')}"])
    if record.reason:
        rows.append(["reason", record.reason])
    rows.append(["run directory", str(record.path)])
    return rows


def mfu_rows(extra: dict) -> list[list[str]]:
    """An LLM's model FLOPs utilisation as stored (secondary results mfu_matmul and mfu_peak), each against
    what it is quoted against; where neither was computed, why not and how to get one."""
    if not isinstance(extra.get("flops_per_token"), (int, float)):
        return []
    rows = []
    matmul, peak = extra.get("mfu_matmul"), extra.get("mfu_peak")
    if isinstance(matmul, (int, float)):
        rows.append(["MFU (matmul)", f"{100 * matmul:.1f} % of this system's measured matmul ceiling "
                                     f"({extra.get('matmul_gflops'):.4g} GFLOP/s, dlrun measure matmul): {extra.get('mfu_formula')}"])
    if isinstance(peak, (int, float)):
        rows.append(["MFU (peak)", f"{100 * peak:.1f} % of the device's dense peak "
                                   f"({extra.get('peak_tflops_per_device')} TFLOP/s; {extra.get('peak_source')})"])
    if not rows:
        rows.append(["MFU", f"not computed: {extra.get('peak_source') or 'no peak or ceiling known'}; "
                            "`dlrun measure matmul` stores this system's ceiling for the next runs"])
    return rows


def arch_rows(extra: dict) -> list[list[str]]:
    """Where the code ran another architecture's instructions under emulation: its figure is no hardware's."""
    node = extra.get("node") if isinstance(extra.get("node"), dict) else {}
    if node.get("emulated") is not True:
        return []
    return [["architecture", f"{node.get('arch')}, emulated on this {node.get('host_arch')} node (qemu-user): the "
                             "figure shows the image works, never how fast either machine is"]]


def storage_rows(res: dict, extra: dict) -> list[list[str]]:
    """A storage run's figure, what it is, how the page cache was handled and which file system was read."""
    what = "read bandwidth" if res["metric"] == "read_bandwidth" else "small-file read rate"
    return [[what, f"{res['value']:.4g} {res['unit']}"], ["value is", str(res.get("value_is", ""))],
            ["page cache", str(extra.get("cache"))], ["file system", str(extra.get("fs_type"))],
            ["reader", str(extra.get("reader"))]]


def precision_rows(asked: Any, extra: dict) -> list[list[str]]:
    """What the matrix products ran in, where the result says (the harness records it), and on a CPU without
    bfloat16 instructions that bfloat16 was emulated."""
    ran = extra.get("precision_ran")
    if not ran:
        return []
    text = f"{asked}: ran {ran}" if asked and asked != ran else str(ran)
    if extra.get("native_bf16") is False and ran == "bf16":
        text += " (emulated: this CPU has no bfloat16 instructions, usually slower than fp32)"
    return [["precision", text]]


def knob_rows(knobs: Any) -> list[list[str]]:
    """The speed knobs the run used and why: asked for, tuned (dlrun tune's decision for this machine) or
    default."""
    if not isinstance(knobs, dict) or not knobs:
        return []
    parts = [f"{name} {entry.get('value')} ({entry.get('source')})" for name, entry in knobs.items()
             if isinstance(entry, dict) and entry.get("value") != "n/a"]
    return [["knobs", ", ".join(parts)]] if parts else []


def print_summary(record: Any) -> None:
    from rich.table import Table

    table = Table(title=for_rich(f"run {record.id}: {record.status}"), show_header=False)
    table.add_column(style="bold")
    table.add_column()
    for row in summary_rows(record):
        table.add_row(*(for_rich(cell) for cell in row))
    console().print(table)
