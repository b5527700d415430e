"""dlrun harnesses: what every framework's harness shares - exit codes, the
error type, the output helpers, the command-line number types and
tf_cnn_benchmarks' throughput statistics (the node itself: harness_node.py).  Standard library
only: the PyTorch entry imports it before torch, to report a failed
allocator set-up.

Shipped into containers next to ``harness_pytorch.py`` and next to
``harness_tensorflow.py`` (see their notes), so that both report failures,
exit codes and statistics alike; runs on Python >= 3.6.
"""

import argparse
import json
import math
import os
import platform
import re
import sys
import time
import traceback

from harness_node import (_listdir, _read, cpu_has_native_bf16, cpu_name,  # noqa: F401
                          node_cpu_ticks, node_facts, process_started_unix)
from harness_result_schema import RESULT_PREFIX, result_problems

HARNESS_VERSION = "1"
ERROR_PREFIX = "dlrun-harness: error: "
PERTURB_ENV = "DLRUN_HARNESS_TEST_PERTURB_RANK"
NUM_CLASSES = 1000
REPLICA_RTOL = 1e-6
RULE = "-" * 64

EXIT_UNEXPECTED = 1
EXIT_USAGE = 2
EXIT_WORLD_SIZE = 3
EXIT_DIVERGED = 4
EXIT_NONFINITE = 5
EXIT_WRONG_RESULT = 6
EXIT_IMPOSSIBLE = 7


class HarnessError(Exception):
    """An anticipated failure: reported as one line, exits with ``code``."""

    def __init__(self, message, code=EXIT_USAGE):
        Exception.__init__(self, message)
        self.message = message
        self.code = code


class NullContext(object):
    """A do-nothing ``with`` target (contextlib.nullcontext is Python 3.7+)."""

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def out(line=""):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def print_result(record):
    """The ``DLRUN_RESULT {json}`` line of ``record``, printed once the
    record keeps dlrun's result schema (harness_result_schema); one that
    breaks it fails the run with one line (EXIT_WRONG_RESULT)."""
    problems = result_problems(record)
    if problems:
        raise HarnessError("the result breaks dlrun's result schema: "
                           + "; ".join(problems), EXIT_WRONG_RESULT)
    out(RESULT_PREFIX + json.dumps(record, sort_keys=True))


def error_line(message):
    message = " ".join(str(message).split())  # always exactly one line
    sys.stderr.write(ERROR_PREFIX + message + "\n")
    sys.stderr.flush()


def report_failures(body):
    """``body()``'s exit code; a HarnessError is its one line and its code,
    anything unexpected its traceback, one line and exit 1.  Ctrl-C is not
    caught."""
    try:
        return body()
    except HarnessError as exc:
        error_line(exc.message)
        return exc.code
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        traceback.print_exc()
        error_line("%s: %s" % (type(exc).__name__, exc))
        return EXIT_UNEXPECTED


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose errors are one ``dlrun-harness: error:`` line, exit 2."""

    def error(self, message):
        sys.stderr.write(ERROR_PREFIX + message + "\n")
        sys.exit(EXIT_USAGE)


def positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1, got %s" % text)
    return value


def non_negative(text):
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be >= 0, got %s" % text)
    return value


def median(values):
    v = sorted(values)
    n = len(v)
    mid = n // 2
    return v[mid] if n % 2 else 0.5 * (v[mid - 1] + v[mid])


def perf_stats(batch, step_times):
    """tf_cnn_benchmarks statistics: (mean rate, standard error, jitter)."""
    times = [t for t in step_times if t > 0]
    if not times:
        return 0.0, 0.0, 0.0
    speeds = [batch / t for t in times]
    n = len(speeds)
    mean = batch * n / sum(times)
    avg = sum(speeds) / n
    std = math.sqrt(sum((s - avg) ** 2 for s in speeds) / n)
    med = median(speeds)
    jitter = 1.4826 * median([abs(s - med) for s in speeds])
    return mean, std / math.sqrt(n), jitter


# --- What the timed steps ran on: the node, and what else it did -----------
#
# Quality inputs (docs/results.md, "quality verdicts"; dlrun.results.quality judges):
# around its timed steps each rank reads the node's busy and total CPU time
# (/proc/stat), its own and its children's (data-loader workers), the load
# average and CPU frequency; rank 0 gathers them (the host name packed into
# floats) and reports per host the share of CPUs other processes used.

WINDOW_FIELDS = ("window_s", "node_busy_s", "node_total_s", "own_cpu_s",
                 "load_start", "load_end", "cpu_mhz", "step_spread", "steps",
                 "threads", "cpus_allowed", "node_cpus", "whole")
HOST_FLOATS = 11   # 6 bytes per float (exact in a double): 66 bytes of name
_MISSING = -1.0


def _process_ticks(pid):
    """utime + stime + reaped children's, in ticks (None if gone)."""
    text = _read("/proc/%d/stat" % pid)
    if not text or ")" not in text:
        return None
    fields = text[text.rfind(")") + 2:].split()
    try:
        return sum(int(x) for x in fields[11:15])
    except (ValueError, IndexError):
        return None


def first_step_fields(first_step_unix):
    """The result's fields on a rank's first step (the warm-up's, else the
    timed loop's): when it began, and the seconds to it from the process's
    start (its launcher's fork; exec and the allocator's re-exec keep it)."""
    started = process_started_unix()
    return {"first_step_unix": first_step_unix, "time_to_first_step_s":
            None if started is None else round(first_step_unix - started, 3)}


def descendants(pid):
    """Every process below ``pid`` (its children, theirs, ...)."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        base = "/proc/%d/task" % parent
        for task in _listdir(base):
            for word in (_read("%s/%s/children" % (base, task)) or "").split():
                child = int(word)
                if child not in found:
                    found.append(child)
                    todo.append(child)
    return found


def own_cpu_ticks():
    """CPU ticks of this process and every process below it."""
    pid = os.getpid()
    return sum(t for t in (_process_ticks(p) for p in [pid] + descendants(pid))
               if t is not None)


def cpu_mhz():
    """Mean current frequency of the CPUs this process may use (cpufreq),
    else /proc/cpuinfo's "cpu MHz"; None where neither says."""
    values = []
    for cpu in sorted(os.sched_getaffinity(0)):
        text = _read("/sys/devices/system/cpu/cpu%d/cpufreq/scaling_cur_freq"
                     % cpu)
        if text and text.strip().isdigit():
            values.append(int(text) / 1000.0)
    values = values or [float(v) for v in re.findall(
        r"(?im)^cpu mhz\s*:\s*([\d.]+)", _read("/proc/cpuinfo") or "")]
    return sum(values) / len(values) if values else None


def relative_spread(step_times):
    """1.4826 x the median absolute deviation of the per-step rates over
    their median (tf_cnn_benchmarks' jitter, relative); None below 3."""
    rates = [1.0 / t for t in step_times if t > 0]
    if len(rates) < 3:
        return None
    med = median(rates)
    return 1.4826 * median([abs(r - med) for r in rates]) / med


def pack_text(text, floats=HOST_FLOATS):
    data = text.encode("utf-8")[:6 * floats].ljust(6 * floats, b"\0")
    return [float(int.from_bytes(data[i:i + 6], "big"))
            for i in range(0, len(data), 6)]


def unpack_text(values):
    data = b"".join(int(v).to_bytes(6, "big") for v in values)
    return data.rstrip(b"\0").decode("utf-8", "replace")


class TimedWindow(object):
    """The node around one rank's timed steps.  Made when the benchmark
    starts; ``start()`` before the first timed step, ``stop(step_times,
    threads)`` after the last gives the figures rank 0 gathers
    (WINDOW_FIELDS, then the packed host name).  A timed window too short
    for /proc/stat's ticks to tell (under MEASURE_S) is judged over the
    whole benchmark instead (``whole`` = 1)."""

    MEASURE_S = 0.5

    def __init__(self):
        self.born = self.start()

    def start(self):
        self.at = (node_cpu_ticks(), own_cpu_ticks(), os.getloadavg()[0],
                   time.time())
        return self.at

    def stop(self, step_times, threads):
        window = time.time() - self.at[3]
        whole = window < self.MEASURE_S
        node0, own0, load0, _ = self.born if whole else self.at
        node, own = node_cpu_ticks(), own_cpu_ticks()
        hz = float(os.sysconf("SC_CLK_TCK"))
        busy = total = cpus = None
        if node is not None and node0 is not None:
            busy, total = [(a - b) / hz for a, b in zip(node, node0)][:2]
            cpus = node[2]
        values = [window, busy, total, (own - own0) / hz, load0,
                  os.getloadavg()[0], cpu_mhz(), relative_spread(step_times),
                  len(step_times), threads, len(os.sched_getaffinity(0)),
                  cpus, float(whole)]
        row = [_MISSING if v is None else float(v) for v in values]
        return row + pack_text(platform.node())


def _host_summary(members):
    """One host's figures from its ranks' rows (dicts of WINDOW_FIELDS)."""
    def known(name):
        return [r[name] for r in members if r[name] != _MISSING]
    busy, total, own = known("node_busy_s"), known("node_total_s"), \
        known("own_cpu_s")
    others = None
    if busy and total and sum(total) > 0:
        # every rank read the same node: its mean busy and total time over
        # their (nearly equal) windows, less what the ranks used themselves
        mean_busy, mean_total = sum(busy) / len(busy), sum(total) / len(total)
        others = max(0.0, mean_busy - sum(own)) / mean_total
    mhz, cpus = known("cpu_mhz"), known("node_cpus")
    loads = [(r["load_start"], r["load_end"]) for r in members]
    allowed = known("cpus_allowed")
    return {
        "ranks": [r["rank"] for r in members],
        "node_cpus": int(cpus[0]) if cpus else None,
        "others_share": None if others is None else round(others, 4),
        "own_cpu_s": round(sum(own), 3) if own else None,
        "node_busy_s": round(sum(busy) / len(busy), 3) if busy else None,
        "load_1m": [None if v == _MISSING else v for v in loads[0]],
        "cpu_mhz": round(sum(mhz) / len(mhz), 1) if mhz else None,
        "measured_over": "the whole benchmark (the timed window was too short)"
        if any(r["whole"] == 1.0 for r in members) else "the timed steps",
        "threads_per_rank": int(max(r["threads"] for r in members)),
        "cpus_per_rank": int(min(allowed)) if allowed else None,
    }


def quality_fields(rows):
    """The result's ``quality``: the timed window (the longest rank's), its
    step count, the widest spread of a rank's per-step rates, and per host
    (by name) its ranks, CPUs, the share other processes used, load average
    at start and end, CPU frequency, threads and CPUs per rank."""
    hosts = {}
    for rank, row in enumerate(rows):
        rec = dict(zip(WINDOW_FIELDS, row[:len(WINDOW_FIELDS)]))
        rec["rank"] = rank
        name = unpack_text(row[len(WINDOW_FIELDS):]) or "unknown-host"
        hosts.setdefault(name, []).append(rec)
    recs = [r for members in hosts.values() for r in members]
    spreads = [r["step_spread"] for r in recs if r["step_spread"] != _MISSING]
    return {
        "window_s": max(r["window_s"] for r in recs),
        "steps": int(min(r["steps"] for r in recs)),
        "step_rate_spread": round(max(spreads), 4) if spreads else None,
        "hosts": dict((name, _host_summary(members))
                      for name, members in sorted(hosts.items())),
    }
