"""Telemetry: the sampler's parsing of real published nvidia-smi output (tests/data/telemetry/SOURCES.md), the
sampler itself on this machine (Python 3.6 syntax, standard library only, how it stops), RAPL read or marked
unreadable, the integration behind energy and energy per sample, and a real 2-rank local run that stores its
series and summary (results show, flat export)."""
from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import cli_json, run_cli

from dlrun.probe import telemetry_gpu, telemetry_sampler
from dlrun.telemetry.series import Series, counter_delta, power_integral, read_run
from dlrun.telemetry.summary import summarize

DATA = Path(__file__).parent / "data" / "telemetry" / "nvidia-smi"
SAMPLER = Path(telemetry_sampler.__file__)
GPU_FIELDS = ("power.limit,power.min_limit,power.max_limit,memory.total,vbios_version,driver_version,name,gpu_uuid,"
              "power.draw,temperature.gpu,temperature.memory,clocks.current.graphics,clocks.sm,clocks.mem,"
              "utilization.gpu,utilization.memory,fan.speed,pcie.link.width.current,pstate").split(",")


# ------------------------------------------------------------------------------------ nvidia-smi, published output
def test_csv_with_header_and_units_loop_output():
    rows = telemetry_gpu.parse_query_csv((DATA / "ksysguard27_csv_loop.csv").read_text())
    assert len(rows) == 13 and rows[0]["power.draw"] == 83.92 and rows[0]["clocks.sm"] == 1320
    assert rows[0]["utilization.gpu"] == 26 and rows[0]["clocks.mem"] == 5001 and rows[0]["pstate"] == "P3"
    sample = telemetry_gpu.smi_sample(rows[-1])
    assert (sample["i"], sample["util"], sample["power_w"], sample["sm_mhz"], sample["mem_mhz"]) == (0, 25, 83.43,
                                                                                                   1440, 5001)


def test_csv_of_two_gpus_keeps_names_and_memory():
    rows = telemetry_gpu.parse_query_csv((DATA / "bpytop26_csv_2gpus.csv").read_text())
    assert [(r["gpu_name"], r["memory.used"], r["power.draw"]) for r in rows] == [
        ("GeForce GTX 1080 Ti", 2856, 106.56), ("GeForce GTX 1060 6GB", 4, 5.68)]


def test_noheader_nounits_with_not_available_fields():
    (row,) = telemetry_gpu.parse_query_csv((DATA / "gpuutils83_noheader_nounits.csv").read_text(), GPU_FIELDS)
    assert row["power.draw"] == 176.98 and row["temperature.memory"] is None and row["clocks.sm"] == 1965
    assert row["name"] == "GeForce RTX 2080" and row["pcie.link.width.current"] == 8
    assert telemetry_gpu.parse_query_csv("0, 1\n", ["index"]) == []  # a line of another shape is skipped


def test_throttle_masks_and_missing_values():
    assert telemetry_gpu.smi_value("0x0000000000000004") == 4 and telemetry_gpu.smi_value("[Not Supported]") is None
    assert telemetry_gpu.smi_value(" 45 ") == 45 and telemetry_gpu.smi_value("12.50 W") == 12.5


# ------------------------------------------------------------------------------------ the sampler program
def test_sampler_is_python36_and_standard_library_only():
    proc = subprocess.run([sys.executable, "-c", "import sys, vermin; sys.exit(vermin.main())", "-t=3.6-",
                           "--no-tips", "--violations", str(SAMPLER), telemetry_gpu.__file__],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    stdlib = set(sys.stdlib_module_names) | {"pynvml", "telemetry_gpu", "dlrun"}  # pynvml: optional, guarded
    imported = {a.name.split(".")[0] for p in (SAMPLER, Path(telemetry_gpu.__file__))
                for n in ast.walk(ast.parse(p.read_text())) if isinstance(n, ast.Import) for a in n.names}
    assert imported <= stdlib, imported - stdlib


def _lines(path: Path, count: int, timeout: float = 60) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.is_file():
            lines = [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]
            if len(lines) >= count:
                return lines
        time.sleep(0.05)
    pytest.fail(f"{path} did not get {count} lines")


def _sampler(tmp_path: Path, *args: str) -> tuple[subprocess.Popen, Path]:
    out = tmp_path / "telemetry"
    proc = subprocess.Popen([sys.executable, str(SAMPLER), "--period", "0.2", "--out", str(out), *args],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return proc, out


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "stop file"])
def test_the_sampler_flushes_and_ends_on_a_signal_or_its_stop_file(tmp_path, how):
    proc, out = _sampler(tmp_path, "--stop-file", str(tmp_path / "stop"))
    (series,) = [out / name for name in _wait_files(out)]
    header, first = _lines(series, 2)[:2]
    assert header["dlrun_telemetry"] == 1 and header["period_s"] == 0.2 and header["cpus"] == len(first["cpu"])
    assert all(v is None or 0 <= v <= 100 for v in first["cpu"]) and first["mem_mib"] > 0
    if how == "stop file":
        (tmp_path / "stop").write_text("")
    else:
        proc.send_signal(getattr(signal, how))
    assert proc.wait(timeout=30) == 0, proc.stderr.read()
    lines = [json.loads(line) for line in series.read_text().splitlines()]
    assert lines[-1]["reason"] == how and lines[-1]["samples"] == len(lines) - 2 and lines[-1]["cpu_s"] >= 0


def _wait_files(out: Path, timeout: float = 60) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        names = sorted(p.name for p in out.glob("*.jsonl")) if out.is_dir() else []
        if names:
            return names
        time.sleep(0.05)
    pytest.fail("the sampler wrote no series")


def test_the_sampler_ends_when_its_parent_dies(tmp_path):
    """A parent that starts the sampler with --watch-parent and is killed: the sampler stops by itself."""
    out = tmp_path / "telemetry"
    parent = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; subprocess.Popen(sys.argv[1:]); "
                               "time.sleep(600)", sys.executable, str(SAMPLER), "--period", "0.2", "--out", str(out),
                               "--watch-parent"])
    (name,) = _wait_files(out)
    _lines(out / name, 2)
    parent.kill()
    parent.wait(timeout=10)
    last = _lines(out / name, 3)
    deadline = time.monotonic() + 30
    while "end" not in last[-1] and time.monotonic() < deadline:
        time.sleep(0.05)
        last = [json.loads(line) for line in (out / name).read_text().splitlines()]
    assert last[-1]["reason"] in ("SIGTERM", "parent exited")


def test_rapl_is_read_where_readable_and_marked_unreadable_where_not(tmp_path):
    here = telemetry_sampler.Rapl("/")
    if here.zones:  # a machine whose RAPL counters this user can read
        assert all(isinstance(v, int) for v in here.read().values()) and here.why is None
    else:
        assert here.header() == {"readable": False, "why": here.why, "zones": {}} and here.why
    root = tmp_path / "readable"
    for zone, name, value in (("intel-rapl:0", "package-0", "123456"), ("intel-rapl:0:0", "core", "1"),
                              ("intel-rapl:0:1", "dram", "789")):
        (root / "sys/class/powercap" / zone).mkdir(parents=True)
        (root / "sys/class/powercap" / zone / "name").write_text(name + "\n")
        (root / "sys/class/powercap" / zone / "energy_uj").write_text(value + "\n")
        (root / "sys/class/powercap" / zone / "max_energy_range_uj").write_text("262143328850\n")
    rapl = telemetry_sampler.Rapl(str(root))
    assert rapl.read() == {"intel-rapl:0": 123456, "intel-rapl:0:1": 789}  # core is part of the package
    blocked = tmp_path / "blocked" / "sys/class/powercap/intel-rapl:0"
    (blocked / "energy_uj").mkdir(parents=True)  # an energy_uj that cannot be opened for reading
    (blocked / "name").write_text("package-0\n")
    rapl = telemetry_sampler.Rapl(str(tmp_path / "blocked"))
    assert rapl.header()["readable"] is False and "not readable" in rapl.why and rapl.read() == {}


def test_without_nvml_library_or_nvidia_smi_the_gpu_source_says_why():
    reader, source, why = telemetry_gpu.open_gpus(1.0)
    if reader is None:  # this machine: no NVIDIA driver
        assert source == "none" and "nvidia-smi is not on PATH" in why
        assert "NVML" in why or "pynvml" in why
    else:
        reader.close()
        assert source in ("nvml", "nvidia-smi")


# ------------------------------------------------------------------------------------ integration
def test_counters_wrap_and_power_integrates_over_the_window():
    assert counter_delta([(0, 90), (1, 95), (2, 5), (3, 15)], 0.5, 3, wrap=100) == pytest.approx(22.5)
    assert counter_delta([(0, 90), (1, 5)], 0, 1, wrap=None) is None  # a reset, not a wrap: unknown
    assert counter_delta([(1, 0), (2, 1)], 0, 2, wrap=None) is None  # the window starts before the samples
    powers = [float(r["power.draw"]) for r in telemetry_gpu.parse_query_csv((DATA / "ksysguard27_csv_loop.csv").read_text())]
    points = list(enumerate(powers))  # the published loop printed one row a second
    expected = sum((a + b) / 2 for a, b in zip(powers, powers[1:]))
    assert power_integral(points, 0, 12) == pytest.approx(expected)


def _series(node: str, powers: list[float], *, rapl: bool) -> Series:
    header = {"dlrun_telemetry": 1, "node": node, "period_s": 1.0,
              "rapl": {"readable": rapl, "why": None if rapl else "not here", "zones": {
                  "intel-rapl:0": {"name": "package-0", "max_uj": 10**9}} if rapl else {}},
              "gpu": {"source": "nvidia-smi", "why": None, "devices": []}}
    samples = [{"t": 100.0 + i, "cpu": [50.0, 100.0], "load": [1.0], "mem_mib": 10, "mhz": [1, 2, 3],
                "rapl_uj": {"intel-rapl:0": (i * 300 * 10**6) % 10**9},  # 300 W, wrapping
                "gpu": [{"i": 0, "util": 90, "power_w": p, "throttle": 4 if i % 2 else 0}]} for i, p in enumerate(powers)]
    return Series(node=node, header=header, samples=samples, end={"end": 110, "reason": "SIGTERM"})


def test_energy_per_sample_over_the_timed_window():
    powers = [100.0] * 11
    result = {"metric": "throughput", "value": 50.0, "unit": "images/sec",
              "extra": {"timed_start_unix": 102.0, "wall_time_s": 4.0}}
    summary = summarize([_series("n1", powers, rapl=True)], result)
    assert summary["window"] == {"what": "timed window", "start": 102.0, "end": 106.0, "seconds": 4.0}
    assert summary["gpu"]["energy_j"] == pytest.approx(400.0) and summary["cpu_energy"]["joules"] == pytest.approx(1200.0)
    per_sample = summary["energy_per_sample"]
    assert per_sample["unit"] == "J/image" and per_sample["value"] == pytest.approx(1600.0 / 200)
    assert summary["gpu"]["throttled_s"] == {"sw_power_cap": 2.0} and summary["cpu"]["mean_util_pct"] == 75.0
    unreadable = summarize([_series("n1", powers, rapl=False)], result)
    assert unreadable["cpu_energy"] == {"readable": False, "why": "not readable here (n1: not here)"}
    assert unreadable["energy_covers"] == ["gpu"] and unreadable["energy_j"] == pytest.approx(400.0)
    assert summary["sampler_cpu_s"] is None  # these series' end lines do not say what sampling cost


# ------------------------------------------------------------------------------------ a real local run
@pytest.mark.mpi
def test_a_two_rank_local_run_stores_its_series_and_summary(dlrun_home, tmp_path):
    proc = run_cli("run", "resnet18", "--ranks-per-node", "2", "--batch-size", "2", "--steps", "4",
                   "--warmup-steps", "1")
    assert proc.returncode == 0, proc.stderr
    (run,) = cli_json("results", "list")
    shown = cli_json("results", "show", run["id"])
    series = read_run(Path(shown["run_dir"]))
    assert len(series) == 1 and series[0].end["reason"] == "SIGTERM" and len(series[0].samples) >= 2
    telemetry = shown["provenance"]["telemetry"]
    assert telemetry["window"]["what"] == "timed window" and telemetry["cpu"]["mean_util_pct"] > 0
    cpu_energy = telemetry["cpu_energy"]
    assert cpu_energy["readable"] is False and "not readable here" in cpu_energy["why"] or cpu_energy["joules"] > 0
    assert shown["results"][0]["extra"]["telemetry"]["cpu_mean_util_pct"] == telemetry["cpu"]["mean_util_pct"]
    text = run_cli("results", "show", run["id"]).stdout
    assert "telemetry" in text and "energy per sample" in text
    out = tmp_path / "runs.csv"
    assert run_cli("results", "export", "--out", str(out)).returncode == 0
    header, row = out.read_text().splitlines()[:2]
    assert "cpu_mean_util_pct" in header.split(",") and "energy_per_sample_unit" in header.split(",")
    assert not [pid for pid in os.listdir("/proc") if pid.isdigit() and _is_sampler(pid, str(dlrun_home))]


def _is_sampler(pid: str, run_dir: str) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(part.endswith(b"telemetry_sampler.py") and part.startswith(run_dir.encode()) for part in cmdline)


@pytest.mark.mpi
def test_a_failed_run_keeps_its_complete_series(dlrun_home):
    from test_run_lifecycle import sampler_ended

    proc = run_cli("run", "trivial", "--ranks-per-node", "2", "--batch-size", "2", "--steps", "3",
                   "--warmup-steps", "1", "--env", "DLRUN_HARNESS_TEST_PERTURB_RANK=1")
    assert proc.returncode == 1, proc.stderr
    (run,) = cli_json("results", "list")
    assert run["status"] == "failed"
    shown = cli_json("results", "show", run["id"])
    sampler_ended(Path(shown["run_dir"]))
    assert shown["provenance"]["telemetry"]["window"]["what"] == "whole job"  # no result, no timed window


# ------------------------------------------------------------------------------------ batch scripts
@pytest.mark.parametrize("code", [0, 3])
def test_the_batch_lines_start_the_sampler_and_the_exit_trap_stops_it(tmp_path, code):
    """The lines every batch script gets (here with a one-node start command, as a one-node job runs it), run by
    bash: the job's exit status stays the job's, the series ends through the stop file, no sampler is left."""
    from golden_files import shellcheck_path

    from dlrun.shell import join
    from dlrun.telemetry.launch import batch_lines, batch_sampler_argv, sampler_files

    for name, text in sampler_files().items():
        (tmp_path / name).write_text(text)
    lines = batch_lines(join(batch_sampler_argv(0.2)))
    wait_for_series = 'while [ -z "$(ls "${DLRUN_RUN_DIR}/telemetry/"*.jsonl 2>/dev/null)" ]; do sleep 0.05; done'
    script = tmp_path / "job.sh"
    script.write_text("\n".join(["#!/usr/bin/env bash", "set -euo pipefail", *lines, wait_for_series,
                                 f"exit {code}"]) + "\n")
    assert subprocess.run([shellcheck_path(), "--severity=style", str(script)], capture_output=True).returncode == 0
    proc = subprocess.run(["bash", str(script)], env={**os.environ, "DLRUN_RUN_DIR": str(tmp_path)}, timeout=120)
    assert proc.returncode == code
    (series,) = (tmp_path / "telemetry").glob("*.jsonl")
    assert json.loads(series.read_text().splitlines()[-1])["reason"] == "stop file"
    assert not [pid for pid in os.listdir("/proc") if pid.isdigit() and _is_sampler(pid, str(tmp_path))]


@pytest.mark.parametrize("scheduler, launcher, start", [
    ("slurm", "srun", "srun --overlap --nodes=2 --ntasks=2 --ntasks-per-node=1 --cpus-per-task=1"),
    ("pbs", "mpirun", "pbsdsh -u /usr/bin/env python3"),
    ("lsf", "jsrun", "jsrun --nrs 2 --rs_per_host 1 --tasks_per_rs 1 --cpu_per_rs 1 --gpu_per_rs 0")])
def test_batch_jobs_start_one_sampler_per_node_before_the_launch(scheduler, launcher, start, monkeypatch):
    from matrix_catalog import matrix_plan

    from dlrun.render import render_job

    monkeypatch.setenv("DLRUN_HOME", "/nonexistent/dlrun-home")
    script = render_job(matrix_plan("singularity", launcher, "ib", scheduler=scheduler)).script
    lines = script.splitlines()
    (started,) = [i for i, line in enumerate(lines) if "telemetry_sampler.py" in line]
    assert lines[started].startswith(start) and lines[started].endswith("&")
    assert "--stop-file \"${DLRUN_RUN_DIR}/telemetry/stop\"" in lines[started]
    assert lines.index("trap dlrun_stop_telemetry EXIT") < len(lines) - 1  # before the launch, the job's last line
    off = matrix_plan("singularity", launcher, "ib", scheduler=scheduler).model_copy(update={"telemetry_period": None})
    assert "telemetry" not in render_job(off).script
