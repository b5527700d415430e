"""Shared helpers for the dlrun benchmarks: timing, alternation, rows for the ratio table."""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
VENV_BIN = Path(sys.executable).parent
PYTHON = sys.executable
DLRUN = str(VENV_BIN / "dlrun")
# The entry file (it imports its siblings from its own directory), as `dlrun run` starts it.
HARNESS = REPO_ROOT / "launcher" / "dlrun" / "harness" / "harness_pytorch.py"


@dataclass
class Row:
    """One line of the ratio table: what was measured, its goal and whether it was met."""

    bench: str
    name: str
    value: float | None          # the ratio (or seconds, for the launcher-cost rows)
    unit: str = "x"              # "x" for ratios, "s" for times, "%" for shares
    goal: float | None = None
    goal_op: str = ">="          # ">=" or "<="
    detail: str = ""             # the numbers behind the ratio
    status: str = ""             # PASS | MISS | SKIP | N/A | INFO (filled in by `judge`)
    extra: dict[str, Any] = field(default_factory=dict)

    def judge(self) -> "Row":
        if self.status:
            return self
        if self.value is None:
            self.status = "SKIP"
        elif self.goal is None:
            self.status = "INFO"
        elif self.goal_op == ">=":
            self.status = "PASS" if self.value >= self.goal else "MISS"
        else:
            self.status = "PASS" if self.value <= self.goal else "MISS"
        return self

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def median(values: list[float]) -> float:
    return statistics.median(values)


def spread(values: list[float]) -> str:
    """`median (min-max, n)` for the detail column."""
    if not values:
        return "-"
    return f"{median(values):.2f} ({min(values):.2f}-{max(values):.2f}, n={len(values)})"


def alternate(variants: dict[str, Callable[[], float]], repeats: int, log: Callable[[str], None]) -> dict[str, list[float]]:
    """Run each variant once per round, so that drifting machine load hits all of them alike; the order
    flips every round (A B, B A, A B, ...) so that no variant always runs first or always follows another."""
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for round_ in range(repeats):
        order = list(variants.items())
        if round_ % 2:
            order.reverse()
        for name, fn in order:
            value = fn()
            samples[name].append(value)
            log(f"  round {round_ + 1}/{repeats} {name}: {value:.3f}")
    return samples


def alternate_until_decided(variants: dict[str, Callable[[], float]], goal: float, least: int, most: int,
                            log: Callable[[str], None]) -> dict[str, list[float]]:
    """Alternate two variants, a round at a time (the order flipped every round), until the interval of their
    per-round ratio (the first variant's value over the second's) decides against `goal` (PASS or MISS) after
    at least `least` rounds, or `most` rounds have run: as many rounds as the machine's noise needs, no more."""
    (top, _), (bottom, _) = variants.items()
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for done in range(most):
        for name, fn in list(variants.items())[::-1 if done % 2 else 1]:
            samples[name].append(fn())
        ratios = [a / b for a, b in zip(samples[top], samples[bottom])]
        interval = ratio_interval(ratios)
        log(f"  round {done + 1}: {top} / {bottom} {ratios[-1]:.3f}, so far {interval_text(interval)}")
        if done + 1 >= least and verdict(interval, goal) != "INCONCLUSIVE":
            break
    return samples


def run_json(argv: list[str], env: dict[str, str] | None = None, timeout: float = 900,
             marker: str | None = None) -> tuple[dict[str, Any], float]:
    """Run a command that prints one JSON line (the last line, or the one after `marker`); (data, wall s)."""
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])}... exited {proc.returncode}: {proc.stderr.strip()[-800:]}")
    lines = proc.stdout.strip().splitlines()
    if marker:
        lines = [ln[len(marker):] for ln in lines if ln.startswith(marker)]
    if not lines:
        raise RuntimeError(f"{' '.join(argv[:4])}... printed no result")
    return json.loads(lines[-1]), wall


def compile_launcher() -> bool:
    """Byte-compile dlrun's modules, as installing a wheel does, before timing its start-up.

    Where PYTHONDONTWRITEBYTECODE is set (CI images, some containers) an editable install never writes its
    bytecode, so every `dlrun` process would compile about 80 modules again (0.08-0.10 s on a 2-core Zen 4),
    a cost no installed dlrun pays. Python reads the bytecode even where it may not write it."""
    import compileall

    return bool(compileall.compile_dir(str(REPO_ROOT / "launcher" / "dlrun"), quiet=1))


def wall_time(argv: list[str], env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()[-400:]}")
    return wall


def bench_env(threads: int, **extra: str) -> dict[str, str]:
    """The environment dlrun gives a rank (same thread count) for every process we time."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_PRELOAD", "MALLOC_CONF") and not k.startswith("MALLOC_")}  # each variant sets its own
    env.update({"OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1"})
    env.update(extra)
    return env


def harness_allocator() -> tuple[str, str | None]:
    """The allocator the harness picks by default on this machine (name, library), as it decides it."""
    sys.path.insert(0, str(REPO_ROOT / "launcher"))
    from dlrun.harness import load_harness

    h = load_harness("pytorch", "allocator")
    action, name, library = h.plan_allocator("auto", None, h.find_allocator)
    return name, library


def allocator_env(name: str, library: str | None) -> dict[str, str]:
    """Environment that gives a plain Python process the allocator the harness runs under."""
    sys.path.insert(0, str(REPO_ROOT / "launcher"))
    from dlrun.harness import load_harness

    h = load_harness("pytorch", "allocator")
    if name == "tcmalloc":
        return {"LD_PRELOAD": str(library)}
    if name == "jemalloc":
        return {"LD_PRELOAD": str(library), "MALLOC_CONF": h.JEMALLOC_CONF}
    if name == "glibc-tuned":  # the harness's mallopt settings, under glibc's environment names
        return {env_name: str(value) for _, env_name, value in h.GLIBC_TUNING}
    return {}


def latest_result(home: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(run, its first result) of the newest run in the dlrun store under DLRUN_HOME=home. The measured value
    is the result's (`result["value"]`): a stored run carries its plan, key and status, no value of its own."""
    sys.path.insert(0, str(REPO_ROOT / "launcher"))
    from dlrun.results.store import Store

    store = Store(home / "results.sqlite")
    run = store.get_run(store.list_runs(1)[0]["id"])  # the full record: plan and results too
    return run, run["results"][0]


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def write_result(name: str, data: dict[str, Any]) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    return path


def processor() -> dict[str, Any]:
    """The processor a ratio was measured on: model, vector and matrix extensions, whether it multiplies bf16
    natively, and the ISA torch dispatches to. Every benchmark row carries it, and RESULTS.md keeps one table
    per processor kind, so that a regression on one kind stays visible."""
    sys.path.insert(0, str(REPO_ROOT / "launcher"))
    from dlrun.probe.cpu import cpu_model, isa_flags

    flags = isa_flags()
    try:
        import torch

        capability = torch.backends.cpu.get_cpu_capability()
    except Exception:  # noqa: BLE001 - torch is optional for some benchmarks
        capability = None
    return {"model": cpu_model(), "cpus": cpu_count(), "isa": flags, "torch_capability": capability,
            "avx512": "avx512f" in flags, "bf16": any(f in flags for f in ("avx512_bf16", "amx_bf16", "bf16")),
            "amx": any(f.startswith("amx") for f in flags)}


def processor_label(proc: dict[str, Any]) -> str:
    """`AMD EPYC, 2 CPUs, AVX-512 + AVX512_BF16, no AMX (torch: AVX512)`: the processor kind in one line."""
    vector = "AVX-512" if proc["avx512"] else "AVX2" if "avx2" in proc["isa"] else "no AVX2"
    bf16 = " + AVX512_BF16" if "avx512_bf16" in proc["isa"] else ""
    amx = "AMX" if proc["amx"] else "no AMX"
    return f"{proc['model']}, {proc['cpus']} CPUs, {vector}{bf16}, {amx} (torch: {proc['torch_capability']})"


def ratio_interval(ratios: list[float], level: float = 0.95) -> dict[str, Any]:
    """The geometric mean of per-round ratios with its `level` t-interval, computed on the log scale (a ratio's
    spread is multiplicative; the interval never crosses zero). Fewer than 3 rounds: no interval."""
    import math

    logs = [math.log(r) for r in ratios if r > 0]
    n = len(logs)
    if n == 0:
        return {"n": 0, "ratio": None, "low": None, "high": None}
    mean = sum(logs) / n
    if n < 3:
        return {"n": n, "ratio": math.exp(mean), "low": None, "high": None}
    from scipy import stats

    sd = statistics.stdev(logs)
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * sd / math.sqrt(n)
    return {"n": n, "ratio": math.exp(mean), "low": math.exp(mean - half), "high": math.exp(mean + half)}


def verdict(interval: dict[str, Any], goal: float) -> str:
    """PASS when the whole interval is at or above `goal`, MISS when it is all below, else INCONCLUSIVE."""
    if interval.get("low") is None:
        return "INCONCLUSIVE"
    if interval["low"] >= goal:
        return "PASS"
    if interval["high"] < goal:
        return "MISS"
    return "INCONCLUSIVE"


def interval_text(interval: dict[str, Any]) -> str:
    if interval.get("ratio") is None:
        return "-"
    if interval.get("low") is None:
        return f"{interval['ratio']:.3f}x (n={interval['n']}, too few rounds for an interval)"
    return f"{interval['ratio']:.3f}x (95 % CI {interval['low']:.3f}-{interval['high']:.3f}, n={interval['n']})"


def cpu_seconds(argv: list[str], env: dict[str, str] | None = None, timeout: float = 3600) -> tuple[float, str, float]:
    """(user + system CPU seconds of the process and every child it waited for, its stdout, wall seconds):
    what a run cost the CPUs, which other processes on a shared machine change far less than its wall time.
    Read as the growth of this process's RUSAGE_CHILDREN, so no other child may end meanwhile."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])}... exited {proc.returncode}: {proc.stderr.strip()[-800:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, proc.stdout, wall
