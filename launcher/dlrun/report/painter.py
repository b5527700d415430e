"""The report's plots drawn in a second process while this one reads the store and writes the tables.

Importing matplotlib (0.7-0.8 s on a slow 2-core VM) and drawing the two plots (0.3 s) are the largest costs
of a report after reading the store. Python runs one thread at a time, so a thread cannot overlap them with
the store's reading or with pandas' tables; a process can. `Painter()` forks a child (dlrun's main() does so
before the command line is parsed); the child imports matplotlib and loads its font at once, then waits.
`draw(report, folder)` hands it the gathered report and returns at once; the child writes the PNGs into the
report's temporary folder while the parent renders the tables; `result()` returns the plots with their
image-map areas.

Where fork is not available, or the process already runs other threads (forking those is unsafe), the plots
are drawn in-process: the same files, later. The child ignores SIGINT (the parent decides) and is ended with
the parent: `close()` terminates it, it is a daemon at exit, and it leaves when the parent's end of its pipe
closes (a killed parent).
"""
from __future__ import annotations

import multiprocessing
import signal
import threading
import traceback
from pathlib import Path
from typing import Any

from dlrun.errors import DlrunError
from dlrun.report import plots, ranks_plot, telemetry_plot
from dlrun.report.gather import Report
from dlrun.report.plots import Plot


def draw(report: Report, folder: Path) -> list[Plot]:
    """Every plot of the report: scaling and bars, then the telemetry figures, then the per-rank figures."""
    return plots.draw(report, folder) + telemetry_plot.draw(report, folder) + ranks_plot.draw(report, folder)


def _child(conn: Any, parent_end: Any) -> None:
    parent_end.close()  # so that a parent's death reads as end of file here
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        plots.warm()
    except Exception:  # noqa: BLE001 - the same error is raised again by draw() and sent from there
        pass
    try:
        report, folder = conn.recv()
    except (EOFError, OSError):
        return
    try:
        reply: tuple[str, Any] = ("ok", draw(report, folder))
    except Exception:  # noqa: BLE001 - the parent raises it
        reply = ("error", traceback.format_exc())
    try:
        conn.send(reply)
    except (BrokenPipeError, OSError):
        pass


class Painter:
    """Draws a report's plots, in a forked child where that is safe (see the module's docstring)."""

    def __init__(self, fork: bool = True) -> None:
        self._proc = None
        self._conn = None
        self._plots: list[Plot] | None = None
        self._sender: threading.Thread | None = None
        if not (fork and "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1):
            return
        context = multiprocessing.get_context("fork")
        parent_end, child_end = context.Pipe()
        proc = context.Process(target=_child, args=(child_end, parent_end), name="dlrun-report-plots", daemon=True)
        try:
            proc.start()
        except OSError:  # no process to spare: draw in-process
            parent_end.close()
            child_end.close()
            return
        child_end.close()
        self._proc, self._conn = proc, parent_end

    @property
    def forked(self) -> bool:
        return self._proc is not None

    @property
    def pid(self) -> int | None:
        """The plotting process's id (None when drawing in-process)."""
        return self._proc.pid if self._proc is not None else None

    def draw(self, report: Report, folder: Path) -> None:
        """Start drawing `report`'s plots into `folder` (in-process: draw them now)."""
        if self._conn is None:
            self._plots = draw(report, folder)
            return
        # sent from a thread: the pickled report outgrows the pipe's buffer, and the child reads it only when
        # its imports are done; the tables are rendered here meanwhile
        self._sender = threading.Thread(target=self._send, args=(self._conn, (report, Path(folder))),
                                        name="dlrun-report-send", daemon=True)
        self._sender.start()

    @staticmethod
    def _send(conn: Any, payload: tuple[Report, Path]) -> None:
        try:
            conn.send(payload)
        except (BrokenPipeError, OSError):
            pass  # the child is gone: result() says so

    def result(self) -> list[Plot]:
        """The plots drawn, each with its image-map areas."""
        if self._conn is None:
            if self._plots is None:
                raise RuntimeError("Painter.result() before Painter.draw()")
            return self._plots
        if self._sender is not None:
            self._sender.join()
        try:
            status, value = self._conn.recv()
        except (EOFError, OSError):
            raise self._died() from None
        if status != "ok":
            raise RuntimeError(f"drawing the report's plots failed in its process:\n{value}")
        return value

    def _died(self) -> DlrunError:
        assert self._proc is not None
        self._proc.join(timeout=5)
        code = self._proc.exitcode
        how = f"by signal {-code}" if code is not None and code < 0 else f"with exit code {code}"
        return DlrunError(f"the process drawing the report's plots ended {how} before it finished; "
                         "nothing was written")

    def close(self) -> None:
        """End the child (finished or not)."""
        if self._conn is not None:
            self._conn.close()
        if self._proc is not None:
            if self._proc.is_alive():
                self._proc.terminate()
            self._proc.join(timeout=5)
        self._proc = self._conn = None

    def __enter__(self) -> Painter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
