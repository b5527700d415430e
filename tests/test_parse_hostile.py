"""Logs as hostile input: every pattern that reads a log or a rank's output runs in linear time on long
adversarial lines; `dlrun parse` and `import-log` read regular files only, within a stated size, and never
print a non-finite number.

Linear time is shown without a clock: the lines are long enough (200,000 characters) that a pattern which
backtracks catastrophically would need hours, where a linear one needs milliseconds, and the child that runs
them is fenced by a CPU limit (RLIMIT_CPU) far above the linear cost and far below the quadratic one. The
audit's line, `Iter #1: ` and 20,000 digits, took 12.5 s in the Horovod parser; 200,000 would take 20 min.
The adversarial lines are real lines of the published logs in tests/data/logs (sources in SOURCES.md), one
run of characters at a time blown up to 200,000, with and without the rest of the line after it."""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_cli

LOGS = Path(__file__).parent / "data" / "logs"
HOROVOD = LOGS / "horovod" / "issue712_pytorch_synthetic_4gpu.log"
CPU_FENCE_S = 60

#: Runs in a child: every compiled pattern of the modules that read logs and rank output, against variants of
#: the real lines it matches (or of every log's first lines when it matches none).
PATTERNS = r"""
import re, sys, importlib, pkgutil
from pathlib import Path
import dlrun.results.parsers as parsers

modules = [importlib.import_module(f"dlrun.results.parsers.{m.name}") for m in pkgutil.iter_modules(parsers.__path__)]
modules += [importlib.import_module(name) for name in ("dlrun.execute.failure", "dlrun.fabrics", "dlrun.cli.progress")]
patterns = [(f"{m.__name__}.{n}", p) for m in modules for n, p in vars(m).items() if isinstance(p, re.Pattern)]
lines = [line for path in sorted(Path(sys.argv[1]).rglob("*.log")) for line in path.read_text(errors="replace").splitlines()]
heads = [line for path in sorted(Path(sys.argv[1]).rglob("*.log"))
         for line in path.read_text(errors="replace").splitlines()[:3]]
runs = re.compile(r"\d+|[A-Za-z]+|\s+|[^\w\s]+")
LONG = 200_000

def variants(line):
    for token in runs.finditer(line):
        blown = token.group()[0] * LONG
        yield line[:token.start()] + blown + line[token.end():]
        yield line[:token.start()] + blown

count = 0
for name, pattern in patterns:
    seen = [line for line in lines if pattern.search(line)][:3] or heads
    print(name, len(seen), flush=True)
    for line in seen:
        for variant in variants(line):
            pattern.search(variant)
            pattern.match(variant)
            count += 1
print("searched", len(patterns), "patterns", count, "lines", flush=True)
"""


def _fenced() -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_FENCE_S, CPU_FENCE_S))


def test_every_pattern_that_reads_logs_runs_in_linear_time_on_long_lines():
    proc = subprocess.run([sys.executable, "-c", PATTERNS, str(LOGS)], capture_output=True, text=True,
                          preexec_fn=_fenced, timeout=CPU_FENCE_S * 5)
    last = proc.stdout.strip().splitlines()[-1:] or ["(nothing)"]
    assert proc.returncode == 0, f"the pattern after this line did not finish within {CPU_FENCE_S} s of CPU: {last}"
    searched = proc.stdout.strip().splitlines()[-1].split()
    assert int(searched[1]) >= 20 and int(searched[3]) > 1000, proc.stdout  # NUMBER, TOTAL, ITER, ... all there


def _cli_fenced(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dlrun.cli", *args], capture_output=True, text=True,
                          preexec_fn=_fenced, timeout=CPU_FENCE_S * 5, env={**os.environ, **(env or {})})


@pytest.mark.parametrize("digits", [20_000, 200_000])
def test_the_audits_line_of_digits_parses_at_once(dlrun_home, tmp_path, digits):
    log = tmp_path / "digits.log"
    log.write_text(HOROVOD.read_text().replace("Iter #1: 107.3", "Iter #1: " + "1" * digits, 1))
    proc = _cli_fenced("parse", str(log), "--json")
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr[-500:]
    assert f"has {digits} characters, more than any measurement" in proc.stderr
    log.write_text(HOROVOD.read_text().replace("Iter #1: 107.3 img/sec", "Iter #1: " + "1" * digits + " x", 1))
    proc = _cli_fenced("results", "import-log", str(log), "--system", "s1")  # a line that fails after them
    assert proc.returncode == 0 and proc.stdout.startswith("imported 1 run"), proc.stderr[-500:]


def test_parse_and_import_log_read_regular_files_only(dlrun_home, tmp_path):
    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)
    for target, kind in ((fifo, "FIFO"), (Path("/dev/zero"), "character device"), (tmp_path, "directory")):
        for command in (["parse", str(target)], ["results", "import-log", str(target), "--system", "s1"]):
            proc = _cli_fenced(*command)
            assert (proc.returncode, proc.stderr) == (
                2, f"dlrun: error: log '{target}' is a {kind}, not a regular file; valid: a file\n"), command


def test_a_log_larger_than_the_limit_is_refused(dlrun_home, tmp_path):
    config = tmp_path / "xdg-config" / "dlrun"  # the dlrun_home fixture's XDG_CONFIG_HOME
    config.mkdir(parents=True)
    (config / "config.yaml").write_text("limits:\n  log_bytes: 256\n")
    proc = run_cli("parse", str(HOROVOD))
    assert (proc.returncode, proc.stderr) == (
        2, f"dlrun: error: log '{HOROVOD}' is {HOROVOD.stat().st_size:,} bytes, more than 256 bytes "
           "(limits.log_bytes in config.yaml)\n")
    (config / "config.yaml").write_text("limits:\n  log_bytes: 1 KiB\n")
    assert run_cli("parse", str(HOROVOD)).returncode == 0


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_a_non_finite_number_in_a_result_is_refused(dlrun_home, tmp_path, number):
    log = tmp_path / "result.log"
    log.write_text('DLRUN_RESULT {"metric": "throughput", "value": 12.5, "unit": "images/sec", "world_size": 1, '
                   f'"batch_size_per_rank": 8, "model": "trivial", "per_rank": [12.5, {number}]}}\n')
    proc = run_cli("parse", str(log), "--json")
    assert (proc.returncode, proc.stdout) == (1, ""), proc.stdout
    assert proc.stderr == "dlrun: error: extra field per_rank[1] is not a finite number (NaN or Infinity)\n"
    proc = run_cli("results", "import-log", str(log), "--system", "s1", "--json")
    assert proc.returncode == 1 and "per_rank[1] is not a finite number" in proc.stderr
    assert json.loads(run_cli("results", "list", "--json").stdout) == []


#: The child's peak resident memory after `dlrun parse LOG` (RUSAGE_CHILDREN of a small process that ran only
#: it: a child's ru_maxrss starts from its parent's at exec, and this parent is small).
PEAK = r"""
import json, resource, subprocess, sys
proc = subprocess.run([sys.executable, "-m", "dlrun.cli", "parse", "--json", sys.argv[1]], capture_output=True, text=True)
print(json.dumps({"code": proc.returncode, "out": proc.stdout, "err": proc.stderr[-2000:],
                  "peak_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""


def _parse_peak(path: Path) -> dict:
    proc = subprocess.run([sys.executable, "-c", PEAK, str(path)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert seen["code"] == 0, seen["err"]
    return seen


def test_dlrun_parse_reads_a_log_a_line_at_a_time(tmp_path):
    """A 48 MB log (a real tf_cnn_benchmarks log with 600,000 step lines more) parses in the memory of a
    small one plus less than a quarter of its size (issue 36: `dlrun parse` took about 4x the log's size)."""
    real = LOGS / "tf_cnn_benchmarks" / "tfbenchmarks_pr63_1gpu_2017.log"
    text = real.read_text()
    cut = text.index("total images/sec")
    big = tmp_path / "big.log"
    with open(big, "w") as handle:
        handle.write(text[:cut])
        handle.writelines(f"{step}\timages/sec: 139.2 +/- 0.0 (jitter = 0.3)\t7.917{' ' * 30}\n"
                          for step in range(600_000))
        handle.write(text[cut:])
    size_mib = big.stat().st_size / 2**20
    assert size_mib > 40
    small, large = _parse_peak(real), _parse_peak(big)
    assert json.loads(large["out"])["value"] == json.loads(small["out"])["value"] == 138.95
    assert large["peak_mib"] - small["peak_mib"] < size_mib / 4, (small["peak_mib"], large["peak_mib"], size_mib)
