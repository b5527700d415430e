"""`dlrun report` and the runs' telemetry: a figure of power and utilisation over time per device for each
point (from its newest run's series), and energy columns in the point and run tables. The GPU lines come
from the published nvidia-smi power loop in tests/data/telemetry; the end-to-end test is a real 2-rank local
run on this machine, whose RAPL counters are read where readable and said unreadable where not."""
from __future__ import annotations

import json
import os
from html import escape
from pathlib import Path

import pytest
from compare_data import record
from conftest import cli_json, run_cli

from dlrun.probe import telemetry_gpu
from dlrun.report import Painter, gather, write
from dlrun.report.energy import UNREADABLE, point_cells, trace
from dlrun.results.store.query import Filters
from dlrun.results.store import Store
from dlrun.telemetry.series import read_run
from dlrun.telemetry.summary import summarize

LOOP = Path(__file__).parent / "data" / "telemetry" / "nvidia-smi" / "ksysguard27_csv_loop.csv"
PNG = b"\x89PNG\r\n\x1a\n"


def _powers() -> list[float]:
    return [float(r["power.draw"]) for r in telemetry_gpu.parse_query_csv(LOOP.read_text())]


def _write_series(run_dir: Path, node: str, *, rapl: bool) -> None:
    """A sampler's file: the published GPU power loop (one row a second) and, where `rapl`, a package
    counter growing 50 J a second."""
    header = {"dlrun_telemetry": 1, "node": node, "period_s": 1.0,
              "rapl": {"readable": rapl, "why": None if rapl else "no /sys/class/powercap here",
                       "zones": {"intel-rapl:0": {"name": "package-0", "max_uj": 2**32}} if rapl else {}},
              "gpu": {"source": "nvidia-smi", "why": None}}
    lines = [header] + [{"t": 1000.0 + i, "cpu": [40.0, 60.0], "gpu": [{"i": 0, "power_w": p, "util": 97}],
                         **({"rapl_uj": {"intel-rapl:0": i * 50 * 10**6}} if rapl else {})}
                        for i, p in enumerate(_powers())] + [{"end": 1100.0, "reason": "SIGTERM"}]
    (run_dir / "telemetry").mkdir(parents=True)
    (run_dir / "telemetry" / f"{node}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


def _stored_run(store: Store, tmp_path: Path, node: str, *, rapl: bool, rate: float = 100.0) -> str:
    run, rows = record(rate, system="localhost", machine=None)
    run_dir = tmp_path / run["id"]
    _write_series(run_dir, node, rapl=rapl)
    rows[0]["extra"].update(timed_start_unix=1002.0, wall_time_s=6.0)
    run["run_dir"] = str(run_dir)
    run["provenance"] = {"telemetry": summarize(read_run(run_dir), rows[0])}
    store.add_run(run, rows)
    return run["id"]


def test_a_trace_draws_the_readings_and_leaves_out_what_could_not_be_read(tmp_path):
    _write_series(tmp_path / "a", "n1", rapl=True)
    _write_series(tmp_path / "b", "n2", rapl=False)
    result = {"metric": "throughput", "value": 10.0, "unit": "images/sec",
              "extra": {"timed_start_unix": 1002.0, "wall_time_s": 6.0}}
    both = trace(read_run(tmp_path / "a") + read_run(tmp_path / "b"), result, "pt-1", "resnet50", "r1")
    assert both.window == (2.0, 8.0)
    assert [v for _, v in both.power["n1 GPU 0"]] == _powers() == [v for _, v in both.power["n2 GPU 0"]]
    assert {v for _, v in both.power["n1 CPU (RAPL)"]} == {50.0}  # 50 J a second
    assert "n2 CPU (RAPL)" not in both.power and both.notes == [f"n2: CPU power {UNREADABLE}"]
    assert {v for _, v in both.util["n1 CPU"]} == {50.0} and {v for _, v in both.util["n1 GPU 0"]} == {97.0}


def test_point_energy_is_the_mean_of_the_runs_with_a_reading():
    unreadable = {"window": {}, "energy_j": None, "energy_per_sample": {"value": None}}
    readable = {"window": {}, "energy_j": 300.0, "energy_covers": ["gpu"], "mean_power_w": 50.0,
                "energy_per_sample": {"value": 0.5, "unit": "J/image", "samples_per_joule": 2.0}}
    cells = point_cells([readable, unreadable, {**readable, "energy_j": 500.0}])
    assert cells == {"energy (J)": "400.0 (gpu), mean of 2 of 3 run(s)", "energy per sample": "0.5 J/image",
                     "samples/J": "2 images/J", "mean power (W)": "50.0"}
    assert set(point_cells([unreadable]).values()) == {UNREADABLE}
    assert set(point_cells([None]).values()) == {"-"}  # no telemetry at all: nothing to say of energy


def test_the_report_draws_each_points_telemetry_and_escapes_what_the_nodes_wrote(dlrun_home, tmp_path):
    store = Store(dlrun_home / "results.sqlite")
    hostile = "<img src=x onerror=alert(1)>"
    first = _stored_run(store, tmp_path, "n1", rapl=True)
    second = _stored_run(store, tmp_path, hostile, rapl=False)
    report = gather(store, Filters(), title="energy", selection="every stored run")
    assert [t.run_id for t in report.telemetry.traces] == [second]  # the point's newest run
    out = write(report, tmp_path / "report", store.path, Painter(fork=False))
    html = (out / "index.html").read_text()
    assert (out / "telemetry-1.png").read_bytes().startswith(PNG) and 'src="telemetry-1.png"' in html
    assert 'id="telemetry"' in html and "<th>samples/J</th>" in html and "<th>mean power (W)</th>" in html
    rows = {run_id: html.split(f'<tr id="run-{run_id}"')[1].split("</tr>")[0] for run_id in (first, second)}
    assert "(gpu, cpu (RAPL package-0))" in rows[first] and "(gpu)</td>" in rows[second]
    assert "mean of 2 of 2 run(s)" in html  # both have GPU energy from the published power readings
    assert hostile not in html and f"{escape(hostile)}: CPU power {UNREADABLE}" in html


@pytest.mark.mpi
def test_a_two_rank_local_runs_telemetry_is_reported(dlrun_home, tmp_path):
    proc = run_cli("run", "resnet18", "--ranks-per-node", "2", "--batch-size", "2", "--steps", "4",
                   "--warmup-steps", "1", "--telemetry", "0.2")
    assert proc.returncode == 0, proc.stderr
    (run,) = cli_json("results", "list")
    telemetry = cli_json("results", "show", run["id"])["provenance"]["telemetry"]
    assert telemetry["period_s"] == 0.2 and telemetry["samples"] >= 5 and telemetry["cpu"]["mean_util_pct"] > 0
    out = tmp_path / "report"
    proc = run_cli("report", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    html = (out / "index.html").read_text()
    assert (out / "telemetry-1.png").read_bytes().startswith(PNG) and 'src="telemetry-1.png"' in html
    rapl = Path("/sys/class/powercap")
    readable = any(os.access(p / "energy_uj", os.R_OK) for p in rapl.glob("intel-rapl:*")) if rapl.is_dir() else False
    if readable:
        assert telemetry["cpu_energy"]["joules"] > 0 and "cpu (RAPL" in html
    else:
        assert telemetry["cpu_energy"]["readable"] is False and "not readable here" in telemetry["cpu_energy"]["why"]
        assert f"<td>{UNREADABLE}</td>" in html
