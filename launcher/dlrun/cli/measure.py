"""`dlrun measure matmul`: store this node's matrix-multiply rate for a system, the ceiling that
`dlrun compare` quotes training FLOP rates against."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Optional

import typer

from dlrun.cli.options import JsonOpt
from dlrun.cli.output import fields_table, handle_errors, print_json
from dlrun.errors import UsageError
from dlrun.harness.harness_contract import PRECISIONS
from dlrun.measure import DEFAULT_PRECISIONS

measure_app = typer.Typer(help="Measure this node and store the figure as a result.", no_args_is_help=True)


@measure_app.command("matmul")
@handle_errors
def matmul(system: Annotated[str, typer.Option("--system", "-s", help="System profile this node belongs to.")]
           = "localhost",
           precision: Annotated[Optional[list[str]], typer.Option(
               "--precision", help=f"{', '.join(PRECISIONS)} (repeatable; default {' and '.join(DEFAULT_PRECISIONS)}; "
               "tf32: GPUs only).",
               show_default=False)] = None,
           size: Annotated[int, typer.Option("--size", help="Matrix order n (2 n^3 FLOP per product).")] = 4096,
           repeats: Annotated[int, typer.Option("--repeats", help="Timed products (the median counts).")] = 7,
           threads: Annotated[Optional[int], typer.Option("--threads", help="CPU threads (default: all).",
                                                           show_default=False)] = None,
           as_json: JsonOpt = False) -> None:
    """Measure the matrix-multiply rate (GFLOP/s) per precision and store it for SYSTEM."""
    from dlrun.cli.options import load_catalog
    from dlrun.cli.store import open_store
    from dlrun.errors import unknown_name
    from dlrun.measure import matmul_record, measure_matmul

    for option, value, low in (("--size", size, 64), ("--repeats", repeats, 1), ("--threads", threads, 1)):
        if value is not None and value < low:
            raise UsageError(f"{option} must be >= {low}, got {value}")
    chosen = precision or list(DEFAULT_PRECISIONS)
    for value in chosen:
        if value not in PRECISIONS:
            raise unknown_name("precision", value, PRECISIONS)
    systems = load_catalog().systems
    if system not in systems:
        raise unknown_name("system", system, systems)
    try:
        import torch
    except ImportError:
        raise UsageError("measuring needs PyTorch: pip install -e '.[torch]'") from None
    if "tf32" in chosen and not torch.cuda.is_available():
        raise UsageError("--precision tf32 is a mode of NVIDIA tensor cores, and this node has no CUDA device; "
                         "valid here: fp32, fp16, bf16, amp")
    store = open_store(before_jobs=True)
    stored = []
    with _progress_line(size) as progress:
        for value in chosen:
            run, rows = matmul_record(system, value, measure_matmul(value, size, repeats, threads, progress=progress))
            store.add_run(run, rows)
            stored.append({"id": run["id"], "system": system, "precision": value, **rows[0]})
    if as_json:
        print_json(stored)
        return
    fields_table(f"matmul on {system}", [[f"{s['precision']} ({s['dtype']}, {s['device']})",
                                          f"{s['value']:.1f} GFLOP/s  run {s['id']}"] for s in stored])


@contextmanager
def _progress_line(size: int) -> Iterator[Callable[[int, int, str], None]]:
    """A live line on stderr (a minute or more goes by on a small CPU): what is measured, products done of all
    of that measurement, elapsed time. Gone when the table is printed."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from dlrun.cli.output import console

    line = Progress(TextColumn("matmul {task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn(f"products of {size}x{size}"), TimeElapsedColumn(), console=console(stderr=True),
                    transient=True)
    task = line.add_task("starting", total=None)

    def update(done: int, total: int, what: str) -> None:
        line.update(task, completed=done, total=total, description=what)

    with line:
        yield update
