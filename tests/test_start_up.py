"""A run's start-up: when a rank's process started (exec keeps it), where a `dlrun run`'s time to its first step
went (dlrun's own, then the job's), and the look at how busy the node is, begun when `dlrun run` starts so that it
costs no wall time of its own. Real processes, a real run."""
from __future__ import annotations

import json
import subprocess
import sys
import time

from conftest import run_cli

from dlrun.execute.record import start_up
from dlrun.harness.harness_node import process_started_unix
from dlrun.probe.load import NodeWatch

SMALL = ("--steps", "1", "--warmup-steps", "1", "--batch-size", "2", "--telemetry", "off")


def test_a_process_start_is_its_fork_and_exec_keeps_it():
    code = ("import sys, time; sys.path.insert(0, sys.argv[1]); time.sleep(0.5); "
            "from dlrun.harness.harness_node import process_started_unix; print(process_started_unix())")
    before = time.time()
    proc = subprocess.run(["sh", "-c", 'exec "$0" -c "$1" "$2"', sys.executable, code,
                           str(__import__("dlrun").__path__[0].rsplit("/", 1)[0])],
                          capture_output=True, text=True, timeout=120, check=True)
    started = float(proc.stdout.strip())
    # forked after `before` (10 ms ticks), and not when Python ran half a second later: the shell's exec kept it
    assert before - 0.05 <= started < before + 0.5, (before, started)
    assert process_started_unix(999_999_999) is None  # no such process


def test_start_up_splits_the_time_to_the_first_step_into_dlruns_and_the_jobs():
    result = {"extra": {"first_step_unix": 1010.0}}
    assert start_up(result, 1001.5, 1000.0) == {
        "dlrun_s": 1.5, "job_s": 8.5, "time_to_first_step_s": 10.0,
        "is": "seconds from dlrun's start to the job's (dlrun_s), then to rank 0's first step (job_s)"}
    assert start_up({"extra": {}}, 1001.5, 1000.0) is None  # a result without a first step (a collective)
    assert start_up(None, 1001.5, 1000.0) is None and start_up(result, 1001.5, None) is None


def test_a_look_begun_earlier_waits_only_for_what_is_left_of_it():
    watch = NodeWatch()
    time.sleep(0.2)
    began = time.monotonic()
    load = watch.load(0.5)
    assert time.monotonic() - began >= 0.25  # the look lasts its 0.5 s in all
    assert load.cpus and load.cpus >= 1 and load.others_cpus is not None
    watch = NodeWatch()
    time.sleep(0.6)
    began = time.monotonic()
    watch.load(0.5)
    assert time.monotonic() - began < 0.5  # already long enough: no sleep of its own


def test_a_run_records_its_time_to_first_step_with_dlruns_share(dlrun_home):
    env = {"DLRUN_HOME": str(dlrun_home), "DLRUN_TUNE": "off"}
    before = time.time()
    proc = run_cli("run", "trivial", *SMALL, env=env)
    assert proc.returncode == 0, proc.stderr
    run_id = next(line.split("run ", 1)[1].split(":", 1)[0] for line in proc.stdout.splitlines()
                  if line.strip().startswith("run ") and ": ok" in line)
    stored = json.loads(run_cli("results", "show", run_id, "--json", env=env, check=True).stdout)
    extra = stored["results"][0]["extra"]
    began = extra["start_up"]
    assert extra["first_step_unix"] > before and extra["time_to_first_step_s"] > 0
    assert began["dlrun_s"] > 0 and began["job_s"] > 0
    assert abs(began["dlrun_s"] + began["job_s"] - began["time_to_first_step_s"]) < 0.002
    # the job's share is the rank's own (from its fork) and what dlrun did between starting the job and the fork
    assert began["job_s"] >= extra["time_to_first_step_s"] - 0.02


def test_the_command_line_loads_no_catalog_store_or_model_before_a_command_asks():
    """Every `dlrun` command, `--help` included, starts by importing the application: a command module that imports
    the catalog, the store or pydantic at its top (diagnose did, for one constant) makes every command pay for it
    (importing the application took 0.25 s instead of 0.08 s, measured with -X importtime)."""
    heavy = ("dlrun.catalog", "dlrun.results.store", "dlrun.results.key", "dlrun.plan", "pydantic", "torch", "docker",
             "yaml", "rich.table")
    code = ("import sys, json; import dlrun.cli.app; "
            f"print(json.dumps(sorted(m for m in sys.modules if m.startswith({heavy!r}))))")
    loaded = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert loaded == []


def test_reading_the_store_loads_no_catalog():
    """`results list` and every other command that only reads the store import it: the comparability key's module
    (and with it the catalog's models, 0.18 s of a 0.5 s `results list` on a million-run PostgreSQL store) is
    imported by the writes and upgrades that make keys, not by the store's own import."""
    code = ("import sys, json; import dlrun.results.store, dlrun.results.store.query; "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('dlrun.catalog', 'dlrun.results.key')))))")
    loaded = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert loaded == []
