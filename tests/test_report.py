"""`dlrun report` as a user runs it, over a real store: the page's tables, links, image maps and provenance,
the plots' pixels, the not-like-for-like box, an experiment's published numbers drawn beside the measured
ones, and bad input refused in one line with nothing written."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_cli
from compare_data import add
from report_data import check_png, fill, no_model_counts, read

from dlrun.catalog import load_catalog
from dlrun.paths import harness_hashes
from dlrun.preflight import node_inventory
from dlrun.probe.host import probe_host
from dlrun.reproduce import TaggedStore
from dlrun.report import gather
from dlrun.report.plots import MAX_DOTS, PAGE_WIDTH_PX, bars_plot, scaling_plot
from dlrun.reproduce.work import plan_points
from dlrun.results.fingerprint import fingerprint_of
from dlrun.results.store.query import Filters
from dlrun.results.store import Store


def _report(*args: str, env: dict[str, str]) -> None:
    proc = run_cli("report", *args, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "wrote " in proc.stdout


def _linked(page) -> None:
    """Every in-page link and image-map area lands on an element of the page."""
    targets = [href[1:] for href in page.links + [a["href"] for a in page.areas] if href.startswith("#")]
    assert targets and not [t for t in targets if t not in page.ids]


def test_two_systems_two_fabrics_tables_plots_and_provenance(dlrun_home, tmp_path):
    store = fill(dlrun_home)
    env = no_model_counts(tmp_path / "cache")
    out = tmp_path / "report"
    _report("--out", str(out), "--baseline", "dgx2", env=env)
    page = read(out)
    assert {"scaling", "relative", "fabrics", "runs"} <= page.tables
    _linked(page)
    # not like-for-like: the two runs at batch 32 are shown, and the box says why
    assert "not-like-for-like" in page.ids and "batch per device: 32 (2 runs) ≠ 64 (" in page.text
    # every run is listed with its provenance, and every point links to its runs
    runs = store.list_runs(None)
    assert {f"run-{r['id']}" for r in runs} <= set(page.rows)
    points = {k: v for k, v in page.rows.items() if k.startswith("pt-")}
    assert len(points) == 20  # 2 systems x 2 fabric lines x 5 device counts
    one = points["pt-1"]["title"]
    assert "site site-b" in one and "pytorch-2.13 sha256:aaaaaaaaaaaa" in one and "runs 2026" in one
    assert "geometric mean 79.99 of 3 run(s), 95 % CI 76.11 to 84.06" in one  # 80 x 0.98, 80, 80 x 1.02
    # what each number is: the statistics paragraph and the tables' headers and captions
    assert "statistics" in page.ids and "<th>geometric mean</th>" in page.text
    assert "Welch&#x27;s t on the logs" in page.text  # the captions of the ratios
    # Ren et al. Table III: dgx1v at 80 % of dgx2; Samsi et al.: tcp 15 % below ib on 16 devices
    relative = page.text[page.text.index('id="relative"'):]
    assert "80.0 % [" in relative and "dgx1v" in relative and "16 devices" in relative
    assert "80.0 % [76.5 %, 83.7 %] (n = 3 / 3)" in relative  # the interval and n per side
    assert "-15.0 % [" in page.text[page.text.index('id="fabrics"'):]
    assert "scaling efficiency" in page.text and "speedup" in page.text
    # the plots: their size as the page states it, not blank, every point clickable with its provenance
    images = {img["src"]: img for img in page.images}
    assert set(images) == {"scaling.png", "bars.png"}
    for name, img in images.items():
        check_png(out / name, int(img["width"]), int(img["height"]))
        assert int(img["width"]) == PAGE_WIDTH_PX  # the page's width, drawn at the size it is shown
    assert f"max-width: {PAGE_WIDTH_PX}px" in page.text
    scaling_areas = [a for a in page.areas if a["shape"] == "circle"]
    assert sorted(a["href"] for a in scaling_areas) == sorted(f"#{k}" for k in points)
    for area in page.areas:
        x0, y0, *rest = map(int, area["coords"].split(","))
        img = images["scaling.png" if area["shape"] == "circle" else "bars.png"]
        assert 0 <= x0 <= int(img["width"]) and 0 <= y0 <= int(img["height"]) and area["title"]

    # a second report into the same folder replaces the first, whole; one system, one batch: like-for-like
    _report("--system", "dgx1v", "--out", str(out), env=env)
    page = read(out)
    assert "like-for-like" in page.ids and "not-like-for-like" not in page.ids
    assert "relative" not in page.tables and "fabrics" in page.tables
    assert all("dgx1v" in row["title"] for key, row in page.rows.items() if key.startswith("pt-"))
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left over


def test_wide_repeats_draw_no_whisker_below_zero_and_few_repeats_say_so(dlrun_home, tmp_path):
    """Issue 17's report: 2-rank repeats from 2,618 to 10,888 img/s drew an interval of [-231, 2,025] below
    zero. On the logs the interval stays positive; the repeats are drawn beside it; two repeats get none."""
    store = Store(dlrun_home / "results.sqlite")
    add(store, [2618.0, 10888.0, 6100.0], system="localhost", devices=2, fabric="n/a")
    add(store, [3300.0, 3400.0, 3350.0], system="localhost", devices=1, fabric="n/a")
    add(store, [5000.0, 5400.0], system="localhost", devices=4, fabric="n/a")
    report = gather(store, Filters(), title="wide", selection="every stored run")
    one, two, four = sorted(report.points, key=lambda p: p.devices)
    assert two.values == [2618.0, 6100.0, 10888.0] and len(one.values) == 3  # the repeats travel with the point
    assert 0 < two.row["ci_low"] < min(two.values) and two.row["ci_high"] > max(two.values)  # wide, positive
    assert two.row["speedup_low"] > 0 and two.row["scaling_efficiency_low"] > 0
    assert (four.row["ci_low"], four.row["interval"]) == (None, "too few repeats (2; an interval needs at least 3)")
    bars, scaling = bars_plot(report, tmp_path), scaling_plot(report, tmp_path)
    assert bars.y_range[0] == 0.0 and bars.y_range[1] > two.row["ci_high"]  # from zero, nothing below it
    assert 0 < scaling.y_range[0] < min(two.values)  # a log axis: all of every interval and repeat is on it
    check_png(tmp_path / "bars.png", bars.width, bars.height)
    out = tmp_path / "report"
    _report("--out", str(out), env=no_model_counts(tmp_path / "cache"))
    page = read(out)
    table = page.text[page.text.index('id="scaling"'):]
    row = table[table.index(f'id="{four.anchor}"'):]
    assert "(too few repeats)" in row[:row.index("</tr>")]


def test_many_repeats_are_drawn_evenly_spaced(dlrun_home, tmp_path):
    store = Store(dlrun_home / "results.sqlite")
    add(store, [100.0 + i for i in range(3 * MAX_DOTS)], system="localhost", devices=1, fabric="n/a")
    report = gather(store, Filters(), title="many", selection="every stored run")
    from dlrun.report.plots import _dots

    (point,) = report.points
    dots = _dots(point.values)
    assert len(dots) == MAX_DOTS and (dots[0], dots[-1]) == (100.0, 100.0 + 3 * MAX_DOTS - 1)
    assert scaling_plot(report, tmp_path).areas and (tmp_path / "scaling.png").is_file()


@pytest.mark.parametrize("value", [3.0, 10.0, 1e-3, 7.25e6])
def test_one_run_on_one_device_count_is_drawn_inside_its_axes(dlrun_home, tmp_path, value):
    """A report of one run (a 2-rank local run, a first day's report): one point, so autoscaling would get equal
    limits on both log axes; the limits are the data's with a margin, and the point's link is on the image."""
    store = Store(dlrun_home / "results.sqlite")
    add(store, [value], system="localhost", devices=2, fabric="n/a")
    plot = scaling_plot(gather(store, Filters(), title="one", selection="every stored run"), tmp_path)
    low, high = plot.y_range
    assert low < value < high and high / low > 1.5
    ((x, y, _radius),) = [area.coords for area in plot.areas]
    assert 0 < x < plot.width and 0 < y < plot.height


def _one_line_error(proc, *needles: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dlrun: error: "), proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_bad_input_is_one_line_and_writes_nothing(dlrun_home, tmp_path):
    fill(dlrun_home)
    env = no_model_counts(tmp_path / "cache")
    out = tmp_path / "out"
    _one_line_error(run_cli("report", "--experiment", "localhost_scaling_smok", "--out", str(out), env=env),
                    "unknown experiment 'localhost_scaling_smok'", "did you mean 'localhost_scaling_smoke'")
    _one_line_error(run_cli("report", "--experiment", "localhost_scaling_smoke", "--out", str(out), env=env),
                    "no stored run of experiment 'localhost_scaling_smoke'", "dlrun reproduce localhost_scaling_smoke")
    _one_line_error(run_cli("report", "--since", "2030-01-01", "--out", str(out), env=env),
                    "no stored run matches --since 2030-01-01")
    _one_line_error(run_cli("report", "--system", "dgx-2", "--out", str(out), env=env),
                    "bad --system 'dgx-2'", "did you mean 'dgx2'")
    _one_line_error(run_cli("report", "--baseline", "dgx3", "--out", str(out), env=env),
                    "bad --baseline 'dgx3'", "did you mean 'dgx2'")
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine\n")
    _one_line_error(run_cli("report", "--out", str(a_file), env=env), "is a file")
    _one_line_error(run_cli("report", "--out", str(a_file / "report"), env=env), "cannot be written")
    someone = tmp_path / "someone"
    someone.mkdir()
    (someone / "thesis.tex").write_text("keep me\n")
    _one_line_error(run_cli("report", "--out", str(someone), env=env), "not a dlrun report")
    assert [p.name for p in someone.iterdir()] == ["thesis.tex"]
    assert not out.exists() and not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_report_over_an_earlier_one_keeps_the_users_files(dlrun_home, tmp_path):
    """--out over an earlier report replaced the whole folder, and deleted what the user had put in it; now the
    report replaces the files it wrote (listed in its marker) and nothing else. A dangling link is one line."""
    fill(dlrun_home)
    env = no_model_counts(tmp_path / "cache")
    out = tmp_path / "report"
    _report("--out", str(out), env=env)
    written = sorted(p.name for p in out.iterdir())
    assert {".dlrun-report", "index.html"} <= set(written)
    (out / "notes.txt").write_text("mine\n")
    (out / "figures").mkdir()
    (out / "figures" / "fig1.png").write_bytes(b"my figure")
    stale = out / "old-plot.png"  # a file an earlier version of the report wrote, and this one does not
    stale.write_bytes(b"old")
    marker = json.loads((out / ".dlrun-report").read_text())
    (out / ".dlrun-report").write_text(json.dumps({**marker, "files": [*marker["files"], stale.name, "../x"]}))
    (tmp_path / "x").write_text("outside\n")
    _report("--out", str(out), "--title", "second", env=env)
    assert sorted(p.name for p in out.iterdir()) == sorted([*written, "notes.txt", "figures"])
    assert (out / "notes.txt").read_text() == "mine\n" and (out / "figures" / "fig1.png").read_bytes() == b"my figure"
    assert "<title>second</title>" in (out / "index.html").read_text() and (tmp_path / "x").is_file()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    _one_line_error(run_cli("report", "--out", str(dangling), env=env),
                    f"--out '{dangling}' is a symbolic link to '{tmp_path / 'nowhere'}', which does not exist")
    assert not (tmp_path / "nowhere").exists()


EXPERIMENT = """\
id: refs_report
title: "published numbers drawn beside the measured ones"
document: {name: "dlrun", title: "dlrun's test suite", authors: "the dlrun project"}
where: "tests/test_report.py"
description: "Two points with published throughputs, a derived speedup and a finding."
measure: training
device: cpu
systems: [localhost]
axes:
  - name: model
    values: [trivial]
  - name: ranks_per_node
    values: [1, 2]
status: {kind: runnable}
references:
  - {id: one_rank, kind: quantitative, metric: throughput, conditions: {ranks_per_node: 1}, value: 100, unit: images/s,
     tolerance: {relative: 0.1, why: "ten percent, for the test"}, source: {where: "Table 1", quote: "one rank: 100 img/s"}}
  - {id: two_ranks, kind: quantitative, metric: throughput, conditions: {ranks_per_node: 2}, value: 190,
     unit: images/sec, tolerance: {relative: 0.01, why: "one percent, for the test"}, source: {where: "Table 1", quote: "two: 190"}}
  - {id: a_speedup, kind: quantitative, metric: throughput, conditions: {ranks_per_node: 2}, value: 1.9, unit: x,
     derive: {op: speedup, baseline: {ranks_per_node: 1}}, tolerance: {relative: 0.1, why: "ten percent, for the test"},
     source: {where: "Fig. 2", quote: "a speedup of 1.9"}}
  - {id: it_scales, kind: qualitative, metric: throughput, source: {where: "Sec. 3", quote: "two ranks are faster"}}
"""


def _record(run_id: str, plan) -> dict:
    machine = fingerprint_of(result=None, inventory=node_inventory(), fabric=plan.fabric, nodes=plan.nodes)
    return {"id": run_id, "created_at": f"2026-01-01T00:00:0{run_id[-1]}Z", "status": "ok", "fingerprint": machine,
            "workload": plan.workload.name, "model": plan.workload.model, "image": plan.image.name,
            "image_digest": plan.image.digest, "system": plan.system.name, "fabric": plan.fabric,
            "nodes": plan.nodes, "ranks_per_node": plan.ranks_per_node, "world_size": plan.world_size,
            "batch_size": plan.batch_size, "precision": plan.precision, "plan": plan.summary(),
            "provenance": {"harness_sha256": harness_hashes(Path(plan.image.harness_dir), "pytorch")[0]}}


def test_published_numbers_beside_the_measured_ones(dlrun_home, tmp_path, monkeypatch):
    site = tmp_path / "site" / "experiments"
    site.mkdir(parents=True)
    (site / "refs.yaml").write_text(EXPERIMENT)
    monkeypatch.setenv("DLRUN_PATH", str(tmp_path / "site"))
    catalog = load_catalog(host=probe_host())
    spec = catalog.experiment("refs_report")
    store = Store(dlrun_home / "results.sqlite")
    one, two = plan_points(catalog, spec, "localhost", where={}, repeats=None, local_image=None, store=store)
    for run_id, work, value in (("r1", one, 99.0), ("r2", one, 100.0), ("r3", one, 101.0), ("r4", two, 150.0),
                                ("r5", two, 155.0), ("r6", two, 160.0)):
        result = {"metric": "throughput", "value": value, "unit": "images/sec", "model": work.plan.workload.model,
                  "extra": {"framework": "pytorch", "framework_version": "2.13.0+cpu"}}
        TaggedStore(store.path, spec.id, work.id).add_run(_record(run_id, work.plan), [result])
    out = tmp_path / "report"
    _report("--experiment", "refs_report", "--out", str(out), env=no_model_counts(tmp_path / "cache"))
    page = read(out)
    _linked(page)
    assert "published" in page.tables and "experiment-refs_report" in page.ids
    rows = {k: v for k, v in page.rows.items() if k.startswith("ref-")}
    assert set(rows) == {"ref-refs_report-one_rank", "ref-refs_report-two_ranks", "ref-refs_report-a_speedup"}
    assert rows["ref-refs_report-one_rank"]["title"] == 'published 100 images/s (dlrun, Table 1): "one rank: 100 img/s"'
    table = page.text[page.text.index('id="published"'):page.text.index("</table>", page.text.index('id="published"'))]
    assert "<q>one rank: 100 img/s</q>" in table and "within" in table and "outside" in table
    # the speedup is computed from the points' runs (155 / 100, Welch's t on the logs: 1.43 .. 1.68) and judged
    # against 1.9 +- 10 %, though not drawn
    speedup = table[table.index('id="ref-refs_report-a_speedup"'):]
    speedup = speedup[:speedup.index("</tr>")]
    assert "<td>1.55 [1.4" in speedup and "(n=6)" in speedup and "<td>outside</td>" in speedup
    # the two published throughputs are drawn (open diamonds) and link to their rows; the speedup is listed only
    drawn = sorted(a["href"] for a in page.areas if a["href"].startswith("#ref-"))
    assert drawn == ["#ref-refs_report-one_rank", "#ref-refs_report-two_ranks"]
    assert "ref-refs_report-it_scales" in page.ids and "two ranks are faster" in page.text
    assert [a for a in page.areas if a["href"].startswith("#pt-")]  # beside the measured points
    check_png(out / "scaling.png", *(int(page.images[0][k]) for k in ("width", "height")))
    # each published point is labelled with its source on the plot, and the caption says so
    assert "Open diamonds: published numbers, labelled with their source (dlrun, Table 1)." in page.text


BUSY = "import time\nend = time.time() + 900\nwhile time.time() < end:\n    pass\n"


@pytest.fixture
def busy_core():
    """A process that keeps one core busy, started apart from this one (not its child) and stopped after."""
    started = subprocess.run(["sh", "-c", f"{sys.executable} -c '{BUSY}' >/dev/null 2>&1 & echo $!"],
                             capture_output=True, text=True, check=True)
    pid = int(started.stdout)
    yield pid
    os.kill(pid, signal.SIGKILL)


@pytest.mark.mpi
def test_the_smoke_report_of_a_busy_node_marks_every_point(dlrun_home, tmp_path, busy_core):
    """README's report example, on a node whose other core is kept busy: the runs are contended, the page
    says how many runs are not ok and marks each point, and no scaling efficiency above 120 % stands as a
    result (such a point is implausible)."""
    env = no_model_counts(tmp_path / "cache")
    made = run_cli("reproduce", "localhost_scaling_smoke", "--repeats", "1", env=env, timeout=900)
    assert "warning: this node is busy: other processes use " in made.stdout  # said before the runs start
    runs = Store(dlrun_home / "results.sqlite").get_runs(Filters(experiment=("localhost_scaling_smoke",)))
    assert len(runs) == 2 and all(run["status"] == "ok" for run in runs), [r["provenance"] for r in runs]
    for run in runs:
        assert run["verdict"] == "contended", run["quality"]
        assert any(r.startswith("contended: other processes used") for r in run["quality"]["reasons"])
    out = tmp_path / "report"
    _report("--experiment", "localhost_scaling_smoke", "--out", str(out), env=env)
    page = read(out)
    assert "quality" in page.ids and "2 of 2 runs are not ok: 2 contended" in page.text
    scaling = page.text[page.text.index('id="scaling"'):page.text.index("</table>", page.text.index('id="scaling"'))]
    rows = re.findall(r"<tr id=\"pt-\d+\".*?</tr>", scaling, re.S)
    assert len(rows) == 2 and all('class="q-mark"' in row for row in rows)
    for row in rows:
        efficiency = re.search(r"<td>([\d.]+) %", row.split("<td>", 9)[-1])
        if efficiency and float(efficiency.group(1)) > 120:
            assert ">implausible</span>" in row


def test_a_report_that_would_pool_two_sites_machines_is_refused(dlrun_home, tmp_path):
    from compare_data import DGX2_NODE, add

    store = Store(dlrun_home / "results.sqlite")
    add(store, [98.0, 100.0, 102.0], devices=1, site="a.example.org")
    add(store, [190.0, 195.0, 200.0], devices=2, site="b.example.org", machine={**DGX2_NODE, "cpu": "AMD EPYC 9B45"})
    env = no_model_counts(tmp_path / "cache")
    out = tmp_path / "report"
    refused = run_cli("report", "--out", str(out), env=env)
    assert refused.returncode == 1 and not out.exists()
    assert "on dgx2: site: a.example.org (3 runs) ≠ b.example.org (3 runs)" in refused.stderr
    assert "on dgx2: cpu: AMD EPYC 9B45 (3 runs) ≠ Intel Xeon Platinum 8168 (3 runs)" in refused.stderr
    _report("--out", str(out), "--allow-mismatch", env=env)
    page = read(out)
    assert "not-like-for-like" in page.ids and "sites a.example.org, b.example.org" in page.text


_CALM = {"window_s": 30.0, "steps": 100, "step_rate_spread": 0.01,  # timed steps nothing disturbed
         "hosts": {"n1": {"others_share": 0.01, "node_cpus": 48, "threads_per_rank": 6, "cpus_per_rank": 6}}}


def test_an_implausible_point_is_drawn_apart_and_the_headings_say_what_the_plots_hold(dlrun_home, tmp_path):
    """A 921 % scaling efficiency (compare's verdict: implausible) is a red cross off the solid line, not a
    point on it; bars.png says its bars are per device count (a colour per system); a localhost report's
    heading names no document it does not reproduce."""
    from PIL import Image

    store = Store(dlrun_home / "results.sqlite")
    add(store, [98.0, 100.0, 102.0], system="localhost", devices=1, fabric="n/a", verdict_inputs=_CALM)
    add(store, [1822.0, 1842.0, 1862.0], system="localhost", devices=2, fabric="n/a", verdict_inputs=_CALM)
    report = gather(store, Filters(), title="forged", selection="every stored run")
    one, two = sorted(report.points, key=lambda p: p.devices)
    assert (one.row["quality"], two.row["quality"]) == ("ok", "implausible")
    scaling = scaling_plot(report, tmp_path)
    [area] = [a for a in scaling.areas if a.href == f"#{two.anchor}"]
    x, y, _ = area.coords
    with Image.open(tmp_path / "scaling.png") as image:
        red, green, blue = image.convert("RGB").getpixel((x, y))[:3]
    assert red > 150 and green < 60 and blue < 60, (red, green, blue)  # the red cross, not the line's blue point
    bars = bars_plot(report, tmp_path)
    assert bars.alt == "Geometric mean throughput per device count and system, with the repeats"
    out = tmp_path / "report"
    _report("--out", str(out), env=no_model_counts(tmp_path / "cache"))
    headings = re.findall(r"<h2[^>]*>(.*?)</h2>", read(out).text)
    assert "Scaling: throughput, speedup and efficiency over each system's fewest devices" in headings
    assert not [h for h in headings if "PRACE" in h]
