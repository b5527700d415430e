"""What `dlrun run` draws while its job runs (dlrun.cli.progress.RunDisplay) costs the job's CPUs nothing
where nothing is drawn: rich's progress line redraws itself from a thread of its own, by default ten times a
second (5 ms of CPU a second measured in a ResNet-18 run on a 2-CPU node, whose two CPUs both ran the job's
threads). Where the output is no terminal (a batch log, a pipe, a benchmark) there is no such thread; on a
terminal it redraws twice a second."""
from __future__ import annotations

import io
import threading

from rich.console import Console

from dlrun.catalog import load_catalog
from dlrun.cli import output, progress
from dlrun.plan import resolve_plan
from dlrun.probe.host import probe_host


def _display(monkeypatch, terminal: bool) -> progress.RunDisplay:
    console = Console(file=io.StringIO(), force_terminal=terminal, width=100)
    monkeypatch.setattr(progress, "console", lambda stderr=False: console)
    plan = resolve_plan(load_catalog(host=probe_host()), "trivial", steps=20)
    return progress.RunDisplay(plan)


def _redraw_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if type(t).__name__ == "_RefreshThread"]


def test_no_redrawing_thread_where_the_output_is_no_terminal(monkeypatch):
    display = _display(monkeypatch, terminal=False)
    with display:
        display.sink("stdout", "10\timages/sec: 12.3 +/- 0.1 (jitter = 0.2)\t6.900")
        assert _redraw_threads() == []
    assert display.progress.tasks[0].completed == 10


def test_on_a_terminal_the_progress_line_is_redrawn_twice_a_second(monkeypatch):
    display = _display(monkeypatch, terminal=True)
    with display:
        assert len(_redraw_threads()) == 1
        assert display.progress.live.refresh_per_second == progress.REDRAWS_PER_S == 2
