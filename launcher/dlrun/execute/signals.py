"""SIGINT, SIGTERM and SIGHUP to dlrun while it runs a job: the job is ended (or cancelled at its scheduler)
and the run recorded `cancelled` with the signal, instead of dlrun dying and orphaning the job.

Ctrl-C, `timeout`, systemd's stop and a closed terminal send these. While the job runs, the first one raises
`Interrupted` in the executor; while dlrun stages or records a run, a signal is only remembered (and the run
is cancelled as soon as its job would start), so that no run is left half-written.
"""
from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(BaseException):
    """A handled signal arrived while a job ran (a BaseException, like KeyboardInterrupt)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


def signal_name(signum: int | None) -> str | None:
    return None if signum is None else signal.Signals(signum).name


class SignalGuard:
    """Installs the handlers for its `with` block (main thread only; elsewhere Python's defaults stay)."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._armed = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> "SignalGuard":
        if threading.current_thread() is threading.main_thread():
            for sig in HANDLED:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signum
        if self._armed:
            self._armed = False  # one Interrupted per job: ending it and recording the run is not interrupted
            raise Interrupted(signum)

    @contextmanager
    def armed(self) -> Iterator[None]:
        """Raise `Interrupted` inside this block (at once if a signal came before it)."""
        if self.received is not None:
            raise Interrupted(self.received)
        self._armed = True
        try:
            yield
        finally:
            self._armed = False
