"""`dlrun` with its start-up phases timed: the same main, with the functions `dlrun run` calls wrapped in wall
clocks; writes {phase: [(start s after the process's start, seconds)]} to $DLRUN_PHASES_OUT at exit.
Benchmark 1's start-up rows (bench/startup.py) run `dlrun run` through it."""
from __future__ import annotations

import atexit
import importlib
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "launcher"))
from dlrun.harness.harness_node import process_started_unix  # noqa: E402

STARTED = process_started_unix() or time.time()
BEGAN = time.time()  # the interpreter is up and this script runs
PHASES: dict[str, list[tuple[float, float]]] = {}
#: (module, function, phase): looked up by name at call time, so wrapping the module attribute times every call
WRAPPED = [("dlrun.cli.run", "load_catalog", "catalog"), ("dlrun.cli.run", "resolve", "resolve plan"),
           ("dlrun.render", "render_job", "render"), ("dlrun.cli.store", "open_store", "open store"),
           ("dlrun.preflight", "node_inventory", "node inventory (a thread)"),
           ("dlrun.execute.prerun", "clear", "pre-run checks"), ("dlrun.tune", "knob_decision", "tuner decision"),
           ("dlrun.cli.run", "say_if_busy", "busy look"), ("dlrun.execute.local", "stage", "run directory"),
           ("dlrun.execute.telemetry", "start_sampler", "telemetry sampler start"),
           ("dlrun.execute.local", "_run_job", "job"), ("dlrun.execute.telemetry", "stop_sampler",
                                                        "telemetry sampler stop"),
           ("dlrun.execute.local", "finish", "record and store"), ("dlrun.cli.progress", "print_summary", "summary")]


def _wrap(module: str, name: str, phase: str) -> None:
    mod = importlib.import_module(module)
    fn = getattr(mod, name, None)
    if fn is None:
        return

    def timed(*args, **kwargs):
        began = time.time()
        try:
            return fn(*args, **kwargs)
        finally:
            PHASES.setdefault(phase, []).append((round(began - STARTED, 4), round(time.time() - began, 4)))
    setattr(mod, name, timed)


def _report() -> None:
    out = os.environ.get("DLRUN_PHASES_OUT")
    if out:
        Path(out).write_text(json.dumps({"interpreter_s": BEGAN - STARTED, "imports_s": IMPORTED - BEGAN,
                                         "exit_s": time.time() - STARTED, "phases": PHASES}))


import dlrun.cli.app as app  # noqa: E402
import dlrun.cli.run  # noqa: E402,F401
import dlrun.execute.local  # noqa: E402,F401

IMPORTED = time.time()

if __name__ == "__main__":  # imported (tests/test_bench_paths.py reads its paths), it runs nothing
    for entry in WRAPPED:
        _wrap(*entry)
    atexit.register(_report)
    sys.argv = ["dlrun", *sys.argv[1:]]
    app.main()
