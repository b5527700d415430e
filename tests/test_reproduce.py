"""`dlrun experiments` and `dlrun reproduce`, as a user runs them: every experiment renders on each of its
systems, Table II is reproduced from the harness's own models, and the smoke scaling experiment runs for real
(mpirun, 1 and 2 ranks, 3 repeats), is interrupted by a real SIGINT and resumes without re-running a
finished point."""
from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from browser import check_in_browser
from conftest import run_cli
from job_gate import JobGate, wait_until
from report_data import check_png, read

from dlrun.catalog import load_catalog
from dlrun.catalog.experiments import Derive
from dlrun.probe.host import probe_host
from dlrun.paths import harness_hashes
from dlrun.reproduce import TaggedStore, compare_references, planned_key, prepare, schedule, stored_repeats
from dlrun.reproduce.derived import evaluate
from dlrun.reproduce.stable import more_repeats, stability
from dlrun.reproduce.work import PointWork, plan_points
from dlrun.results.fingerprint import this_machine
from dlrun.results.site import local_site
from dlrun.results.compare.stats import summarize
from dlrun.results.store import Store

SMOKE = "localhost_scaling_smoke"
SMOKE_POINTS = ("model=trivial ranks_per_node=1", "model=trivial ranks_per_node=2")


def _json(*args: str) -> dict:
    proc = run_cli(*args, "--json")
    assert proc.returncode == 0, f"dlrun {' '.join(args)} ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return json.loads(proc.stdout)


def _one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dlrun: error: "), proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


# ------------------------------------------------------------------------------------------ dry runs
def _experiment_ids() -> list[str]:
    return sorted(path.stem for path in (Path(__file__).resolve().parents[1] / "recipes" / "experiments").glob("*.yaml"))


@pytest.mark.parametrize("experiment", _experiment_ids())
def test_every_experiment_renders_for_each_of_its_systems(experiment, catalog, dlrun_home):
    spec = catalog.experiment(experiment)
    data = _json("reproduce", experiment, "--dry-run")
    expected = [None] if spec.measure == "model-facts" else list(spec.systems)
    assert [system["system"] for system in data["systems"]] == expected
    for system in data["systems"]:
        for point in system["points"]:
            if point["skip"] is None:  # runnable: planned, and rendered unless it is counted in-process
                assert point["plan"] is not None and point["missing"] == point["repeats"] >= 1
                assert (point["script"] is None) == (spec.measure == "model-facts"), point["id"]
            else:  # skipped, with the reason, never failed
                assert point["skip"].strip() and point["script"] is None and point["missing"] == 0
    assert not dlrun_home.exists(), "a dry run writes nothing (not even an empty store)"


def test_dry_runs_render_exactly_the_points_the_catalog_says_are_runnable(catalog, tmp_path):
    store = Store(tmp_path / "results.sqlite")
    rendered = counted = 0
    for experiment in catalog.experiments:
        _, systems = prepare(catalog, experiment, system=None, dry_run=True, local_image=None, store=store)
        for system in systems:
            rendered += sum(1 for work in system.works if work.rendered is not None)
            counted += sum(1 for work in system.works if work.facts is not None)
    # tests/test_experiments.py's count (with Samsi et al.'s strategies, Han et al.'s parameter servers, their dd
    # read and models over both file systems, the DGX Cloud recipe's five H100 points and Ren et al.'s 32
    # DataParallel-against-DDP points)
    assert (rendered, counted) == (259 + 2 + 18 + 216 + 15 + 18 + 2 + 8 + 5 + 32, 7)
    assert not store.path.exists()


def test_dry_run_text_lists_skips_with_reasons_and_scripts_as_differences(dlrun_home):
    proc = run_cli("reproduce", "E000_pcie_affinity", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "3 point(s), 0 to run, 3 skipped" in proc.stdout and "skipped (3)" in proc.stdout
    assert "not-reproducible: each configuration is a physical" in proc.stdout

    proc = run_cli("reproduce", "E001_mixed_precision_resnet50", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "15 point(s), 15 to run, 0 skipped" in proc.stdout
    assert proc.stdout.count("#!/usr/bin/env bash") == 1  # the first script whole ...
    assert proc.stdout.count(": differs from point 1 in") == 14  # ... the others as their differences
    whole = run_cli("reproduce", "E001_mixed_precision_resnet50", "--dry-run", "--script")
    assert whole.stdout.count("#!/usr/bin/env bash") == 15 and "differs from" not in whole.stdout


# ------------------------------------------------------------------------------------------ selection
def test_where_selects_by_paper_label_or_dlrun_value(dlrun_home):
    def ids(*where: str) -> list[str]:
        args = [arg for value in where for arg in ("--where", value)]
        data = _json("reproduce", "E001_high_throughput_models_fp32", "--system", "dgx2", "--dry-run", *args)
        return [point["id"] for point in data["systems"][0]["points"]]

    alexnet = ids("model=AlexNet")
    assert len(alexnet) == 5 and all(point.startswith("model=AlexNet gpus=") for point in alexnet)
    assert ids("model=alexnet") == alexnet  # dlrun's value selects the same points as the paper's label
    assert ids("model=AlexNet", "gpus=8") == ["model=AlexNet gpus=8 precision=FP32 data_workers=4"]
    assert ids("model=AlexNet", "model=ResNet50", "gpus=16") == [  # one axis: alternatives; axes: all hold
        "model=AlexNet gpus=16 precision=FP32 data_workers=4", "model=ResNet50 gpus=16 precision=FP32 data_workers=4"]


def test_where_and_system_errors_are_one_line_with_the_closest_match(dlrun_home):
    _one_line_error(run_cli("reproduce", SMOKE, "--where", "ranks=2"),
                    "'ranks' is not an axis of experiment localhost_scaling_smoke", "did you mean 'ranks_per_node'",
                    "valid: model, ranks_per_node")
    _one_line_error(run_cli("reproduce", "E001_high_throughput_models_fp32", "--dry-run", "--where", "model=AlexNett"),
                    "'AlexNett' is not a value of axis model", "did you mean 'AlexNet'",
                    "valid: AlexNet, ResNet18, ResNet50")
    _one_line_error(run_cli("reproduce", SMOKE, "--where", "ranks_per_node"), "bad --where 'ranks_per_node'",
                    "valid: AXIS=VALUE")
    _one_line_error(run_cli("reproduce", "E001_nccl_bus_bandwidth"), "ran on 5 systems",
                    "valid: dgx2, aws-p3dn, dgx1v, ac922, rtx-ts4")
    _one_line_error(run_cli("reproduce", "E001_nccl_bus_bandwidth", "--system", "rtx", "--dry-run"),
                    "'rtx' is not a system of experiment E001_nccl_bus_bandwidth", "did you mean 'rtx-ts4'")
    _one_line_error(run_cli("reproduce", "E001_table2_model_facts", "--system", "localhost"),
                    "counts model facts", "leave out --system localhost")
    _one_line_error(run_cli("reproduce", "E001_tabel2_model_facts"), "unknown experiment 'E001_tabel2_model_facts'",
                    "did you mean 'E001_table2_model_facts'")
    _one_line_error(run_cli("reproduce", SMOKE, "--repeats", "0"), "--repeats must be a positive integer, got 0")
    _one_line_error(run_cli("reproduce", SMOKE, "--script"), "--script prints the scripts of a dry run")
    assert not dlrun_home.exists(), "refused before anything ran or was stored"


# ------------------------------------------------------------------------------------------ experiments
def test_experiments_list_and_show(dlrun_home):
    rows = _json("experiments", "list")
    assert [row["id"] for row in rows] == _experiment_ids()
    smoke = next(row for row in rows if row["id"] == SMOKE)
    assert smoke["document"] == "dlrun" and smoke["systems"] == ["localhost"] and smoke["status"] == "runnable"

    proc = run_cli("experiments", "show", "E001_table2_model_facts")
    assert proc.returncode == 0, proc.stderr
    for text in ('Table II: "ResNet50 25.56 M 4.14 G"', "deviation operation count", "runnable",
                 "points on no system (model facts): 7", "BERT-SQuAD"):
        assert text in proc.stdout, text
    smoke_text = run_cli("experiments", "show", SMOKE).stdout
    assert "2 timed steps after 1 warm-up, 3 repeat(s)" in smoke_text
    data = _json("experiments", "show", "E001_nccl_bus_bandwidth", "--system", "rtx-ts4")
    assert list(data["points"]) == ["rtx-ts4"] and len(data["points"]["rtx-ts4"]) == 6
    _one_line_error(run_cli("experiments", "show", "E001_nccl_bandwidth"), "unknown experiment 'E001_nccl_bandwidth'",
                    "did you mean 'E001_nccl_bus_bandwidth'")
    _one_line_error(run_cli("experiments", "show", SMOKE, "--system", "dgx2"),
                    "'dgx2' is not a system of experiment localhost_scaling_smoke", "valid: localhost")


# ------------------------------------------------------------------------------------------ Table II
# Ren et al. (BNL), Table II, as counted on the harness's own models (torchvision's definitions).
TABLE_II_COUNTED = {
    "alexnet_params": 61_100_840, "alexnet_ops": 714_188_480,
    "resnet18_params": 11_689_512, "resnet18_ops": 1_814_073_344,
    "resnet50_params": 25_557_032, "resnet50_ops": 4_089_184_256,
    "resnet101_params": 44_549_160, "resnet101_ops": 7_801_405_440,
    "resnet152_params": 60_192_808, "resnet152_ops": 11_513_626_624,
    "bert_swag_params": 109_483_009, "bert_squad_params": 109_483_778,
}
# Not what Table II counts for BERT (see the experiment): compared, never judged.
BERT_OPS_COUNTED = {"bert_swag_ops": 6_913_327_872, "bert_squad_ops": 35_333_406_720}


def test_table_ii_is_reproduced_from_the_harness_models(dlrun_home):
    data = _json("reproduce", "E001_table2_model_facts")
    rows = {row["reference"]: row for row in data["references"]}
    for ref_id, counted in TABLE_II_COUNTED.items():
        row = rows[ref_id]
        assert (row["measured"], row["runs"], row["verdict"]) == (counted, 1, "within"), row
        assert row["ratio"] == pytest.approx(counted / row["value"])
        assert row["source"]["doc"] == "Ren et al. (BNL)" and row["source"]["where"] == "Table II"
        assert row["source"]["quote"].lower().startswith(ref_id.split("_")[0])  # "ResNet50 25.56 M 4.14 G"
    for ref_id, counted in BERT_OPS_COUNTED.items():
        row = rows[ref_id]
        assert (row["measured"], row["verdict"]) == (counted, "informational"), row
        assert row["why"].startswith("compared, never judged: ")
    assert set(rows) == set(TABLE_II_COUNTED) | set(BERT_OPS_COUNTED) and data["skipped"] == []

    stored = {point["point"]: point["run_ids"] for point in data["points"]}
    again = _json("reproduce", "E001_table2_model_facts")
    assert again["runs"] == [] and {p["point"]: p["run_ids"] for p in again["points"]} == stored
    assert [row["verdict"] for row in again["references"]] == [row["verdict"] for row in data["references"]]
    assert {row["interval"] for row in again["references"]} == {"exact: a counted fact"}


def test_table_ii_is_reported_counted_against_published(dlrun_home, tmp_path):
    _json("reproduce", "E001_table2_model_facts")
    out = tmp_path / "report"
    proc = run_cli("report", "--experiment", "E001_table2_model_facts", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "7 run(s), 0 point(s), 14 published number(s) set against them" in proc.stdout
    page = read(out)
    assert {"model-facts", "published"} <= page.tables and not page.images  # counts: nothing to plot
    table = page.text[page.text.index('id="model-facts"'):]
    table = table[:table.index("</table>")]
    cells = re.findall(r"<td>(.*?)</td>", table)
    rows = [cells[i:i + 7] for i in range(0, len(cells), 7)]
    by_model = {row[0]: row for row in rows}
    assert list(by_model) == ["AlexNet", "ResNet18", "ResNet50", "ResNet101", "ResNet152", "BERT-SWAG", "BERT-SQuAD"]
    assert by_model["ResNet50"][1:3] == ["25,557,032", "25,560,000 parameters"]
    assert by_model["ResNet50"][4:6] == ["4,089,184,256", "4,140,000,000 multiply-adds"]
    assert all(">within</a>" in row[3] for row in rows)
    assert [">within</a>" in row[6] for row in rows] == [True] * 5 + [False] * 2  # BERT: informational
    assert 'href="#ref-E001_table2_model_facts-resnet50_ops"' in table and "ref-E001_table2_model_facts-resnet50_ops" in page.ids
    # compare has no repeated measurement to compare: it says where the counts are set out
    refused = run_cli("compare", "--experiment", "E001_table2_model_facts")
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.startswith("dlrun: error: nothing to compare: the selected runs hold counted model facts")
    assert "dlrun report --experiment E001_table2_model_facts --out DIR" in refused.stderr


# ------------------------------------------------------------------------------------------ resume
def _record(run_id: str, status: str, plan, **changes) -> dict:
    """A run record as the executor stores it (the columns the comparability key reads, and the plan)."""
    return {"id": run_id, "created_at": f"2026-01-01T00:00:0{run_id[-1]}Z", "status": status,
            "workload": plan.workload.name, "model": plan.workload.model, "image": plan.image.name,
            "image_digest": plan.image.digest, "system": plan.system.name, "fabric": plan.fabric,
            "nodes": plan.nodes, "ranks_per_node": plan.ranks_per_node, "world_size": plan.world_size,
            "batch_size": plan.batch_size, "precision": plan.precision, "plan": plan.summary(),
            "provenance": {"harness_sha256": harness_hashes(Path(plan.image.harness_dir), "pytorch")[0]},
            # made on this machine, as the executor records it
            "fingerprint": this_machine(fabric=plan.fabric, nodes=plan.nodes, device=plan.device), **changes}


def _result(plan, amp_dtype=None, value: float = 100.0) -> dict:
    """A result row as the harness reports it: the framework version only the run knows."""
    return {"metric": "throughput", "value": value, "unit": "images/sec", "model": plan.workload.model,
            "extra": {"framework": "pytorch", "framework_version": "2.13.0+cpu", "amp_dtype": amp_dtype}}


def test_stored_repeats_count_ok_runs_of_the_point_with_its_key(catalog, tmp_path):
    store = Store(tmp_path / "results.sqlite")
    works = plan_points(catalog, catalog.experiment(SMOKE), "localhost", where={}, repeats=None, local_image=None,
                        store=store)
    one, two = works
    plan = one.plan

    def add(run_id: str, point: PointWork, record: dict, result: dict | None, experiment: str = SMOKE) -> None:
        TaggedStore(store.path, experiment, point.id).add_run(record, [result] if result else [])

    add("r1", one, _record("r1", "ok", plan), _result(plan))
    add("r2", one, _record("r2", "ok", plan), _result(plan))
    add("r3", one, _record("r3", "failed", plan), None)                                 # not ok
    add("r4", one, _record("r4", "ok", plan, batch_size=32), _result(plan))             # another key
    add("r5", one, _record("r5", "ok", plan, provenance={"harness_sha256": "0" * 64}), _result(plan))  # harness
    add("r6", two, _record("r6", "ok", plan), _result(plan))                            # another point
    add("r7", one, _record("r7", "ok", plan), _result(plan), experiment="E001_table2_model_facts")
    # made elsewhere: evidence to compare with, never a substitute for a run here
    add("r9", one, _record("r9", "ok", plan, site="b.example.org"), _result(plan))       # another site
    add("r10", one, _record("r10", "ok", plan, origin="bundle"), _result(plan))          # a bundle's run
    elsewhere = {**this_machine(fabric=plan.fabric, nodes=1, device="cpu"), "cpu": "Intel Xeon Platinum 8480+"}
    add("r11", one, _record("r11", "ok", plan, fingerprint=elsewhere), _result(plan))    # another machine here
    assert stored_repeats(store, SMOKE, one.id, planned_key(plan)) == 2
    assert stored_repeats(store, SMOKE, two.id, two.key) == 0  # r6 is tagged with point two but ran point one's plan
    one.refresh(store)
    assert [run.id for run in one.stored] == ["r1", "r2"] and one.missing == 1
    assert one.key["site"] == local_site() and one.key["cpu"] == store.get_run("r1")["key"]["cpu"] != "unknown"
    assert one.stored[0].values == {"throughput": 100.0}
    stored = store.get_run("r1")
    assert (stored["experiment"], stored["point"]) == (SMOKE, one.id)
    assert stored["key"]["framework_version"] == "2.13.0+cpu" and one.key["framework_version"] == "unknown"

    amp = plan.model_copy(update={"precision": "amp"})
    add("r8", one, _record("r8", "ok", amp), _result(amp, amp_dtype="bfloat16"))
    assert store.get_run("r8")["key"]["precision"] == "amp(bfloat16)"
    assert stored_repeats(store, SMOKE, one.id, planned_key(amp)) == 1  # amp, in the type the device chose


REFERENCES_EXPERIMENT = """\
id: refs_check
title: "references of every kind against stored runs"
document: {name: "dlrun", title: "dlrun's test suite", authors: "the dlrun project"}
where: "tests/test_reproduce.py"
description: "Published numbers a point answers directly, and the ones it does not."
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
     tolerance: {relative: 0.1, why: "ten percent, for the test"}, source: {where: "T1", quote: "one rank 100"}}
  - {id: two_ranks, kind: quantitative, metric: throughput, conditions: {ranks_per_node: 2}, value: 100,
     unit: images/sec, tolerance: {relative: 0.01, why: "one percent, for the test"}, source: {where: "T1", quote: "two 100"}}
  - {id: at_most, kind: quantitative, metric: throughput, conditions: {ranks_per_node: 2}, value: 200, unit: images/sec,
     check: at-most, tolerance: {relative: 0.01, why: "one percent, for the test"}, source: {where: "T2", quote: "at most 200"}}
  - {id: a_range, kind: quantitative, metric: throughput, conditions: {ranks_per_node: 1}, range: [102, 110],
     unit: images/sec, tolerance: {absolute: 1, why: "one image, for the test"}, source: {where: "T3", quote: "102 to 110"}}
  - {id: other_unit, kind: quantitative, metric: throughput, conditions: {ranks_per_node: 1}, value: 100, unit: GB/s,
     tolerance: {relative: 0.1, why: "ten percent, for the test"}, source: {where: "T4", quote: "100 GB/s"}}
  - {id: a_speedup, kind: quantitative, metric: throughput, conditions: {ranks_per_node: 2}, value: 1.9, unit: x,
     derive: {op: speedup, baseline: {ranks_per_node: 1}}, tolerance: {relative: 0.1, why: "ten percent, for the test"},
     source: {where: "T5", quote: "speedup 1.9"}}
  - {id: an_ipc, kind: quantitative, metric: ipc, conditions: {ranks_per_node: 1}, value: 1.5, unit: instructions/cycle,
     tolerance: {relative: 0.1, why: "ten percent, for the test"}, source: {where: "T6", quote: "IPC 1.5"}}
  - {id: a_gain, kind: quantitative, metric: throughput, conditions: {ranks_per_node: 2}, value: 50, unit: "%",
     derive: {op: gain, baseline: {ranks_per_node: 1}}, tolerance: {absolute: 5, why: "five points, for the test"},
     source: {where: "T7", quote: "50 % more"}}
  - {id: an_efficiency, kind: quantitative, metric: throughput, conditions: {ranks_per_node: 2}, value: 75, unit: "%",
     derive: {op: scaling-efficiency, baseline: {ranks_per_node: 1}}, tolerance: {absolute: 5, why: "for the test"},
     source: {where: "T8", quote: "75 % efficient"}}
  - {id: a_reduction, kind: quantitative, metric: throughput, value: 33.3, unit: "%",
     derive: {op: reduction, numerator: {ranks_per_node: 1}, denominator: {ranks_per_node: 2}},
     tolerance: {absolute: 0.1, why: "for the test"}, source: {where: "T9", quote: "a third less"}}
  - {id: a_ratio, kind: quantitative, metric: throughput, value: 2, unit: x,
     derive: {op: ratio, numerator: {ranks_per_node: 2}, denominator: {ranks_per_node: 1}},
     tolerance: {relative: 0.1, why: "ten percent, for the test"}, source: {where: "T10", quote: "twice"}}
  - {id: per_node, kind: quantitative, metric: throughput, conditions: {ranks_per_node: 2}, value: 150,
     unit: images/s per node, derive: {op: per-node}, tolerance: {relative: 0.05, why: "for the test"},
     source: {where: "T11", quote: "150 per node"}}
  - {id: to_train, kind: quantitative, metric: throughput, conditions: {ranks_per_node: 2}, value: 1, unit: h,
     derive: {op: time-for-samples, samples: 540000}, tolerance: {relative: 0.05, why: "for the test"},
     source: {where: "T12", quote: "an hour"}}
  - {id: averaged, kind: quantitative, metric: throughput, value: 1.5, unit: x,
     derive: {op: ratio, numerator: {ranks_per_node: 2}, denominator: {ranks_per_node: 1}, aggregate: mean, over: [model]},
     tolerance: {relative: 0.1, why: "for the test"}, source: {where: "T13", quote: "on average"}}
"""


def _refs_check(tmp_path, monkeypatch, values: dict[int, list[float]], store_path: Path | None = None):
    """The points of REFERENCES_EXPERIMENT with runs of the given values (by ranks per node), refreshed."""
    site = tmp_path / "site" / "experiments"
    site.mkdir(parents=True, exist_ok=True)
    (site / "refs.yaml").write_text(REFERENCES_EXPERIMENT)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("DLRUN_PATH", str(tmp_path / "site"))
    catalog = load_catalog(host=probe_host())
    spec = catalog.experiment("refs_check")
    store = Store(store_path or tmp_path / f"results-{len(values[1])}-{len(values[2])}.sqlite")
    one, two = plan_points(catalog, spec, "localhost", where={}, repeats=None, local_image=None, store=store)
    for work, ranks in ((one, 1), (two, 2)):
        for index, value in enumerate(values[ranks]):
            run_id = f"r{ranks}{index}"
            TaggedStore(store.path, spec.id, work.id).add_run(_record(run_id, "ok", work.plan),
                                                              [_result(work.plan, value=value)])
        work.refresh(store)
    return spec, one, two


def test_references_a_point_answers_against_stored_runs(tmp_path, monkeypatch):
    # three repeats a point, 1 % apart: geometric means 100 and 150 img/s, 95 % intervals about +-2.5 %
    spec, one, two = _refs_check(tmp_path, monkeypatch, {1: [100 / 1.01, 100.0, 101.0], 2: [150 / 1.01, 150.0, 151.5]})
    rows = {row.reference.id: row for row in compare_references(spec, [one, two], "localhost")}
    verdicts = {ref_id: (row.verdict, row.measured and round(row.measured, 6), row.runs) for ref_id, row in rows.items()}
    assert verdicts == {
        "one_rank": ("within", 100.0, 3),          # images/s published, images/sec stored: the same unit
        "two_ranks": ("outside", 150.0, 3),
        "at_most": ("within", 150.0, 3),
        "a_range": ("inconclusive", 100.0, 3),     # 102 to 110, one image of tolerance: 97.6 .. 102.5 straddles 101
        "other_unit": ("unit differs", 100.0, 3),
        "a_speedup": ("outside", 1.5, 6),          # 150 / 100 against 1.9 +- 10 %
        "an_ipc": ("not measured", None, 0),
        "a_gain": ("within", 50.0, 6),
        "an_efficiency": ("within", 75.0, 6),      # speedup 1.5 on twice the ranks
        "a_reduction": ("inconclusive", round(100 / 3, 6), 6),  # +-1.5 points against a band of +-0.1
        "a_ratio": ("outside", 1.5, 6),
        "per_node": ("within", 150.0, 3),
        "to_train": ("within", 1.0, 3),            # 540,000 samples at 150 per second
        "averaged": ("derived", None, 0)}
    assert rows["one_rank"].ratio == pytest.approx(1.0) and rows["one_rank"].ci[0] < 100.0 < rows["one_rank"].ci[1]
    assert rows["one_rank"].interval == "95 % t interval on logs"
    assert rows["one_rank"].why == "the interval lies inside the tolerance band"
    # how many repeats would decide, at this spread: t(N-1) x 0.00995 / sqrt(N) below log(101/100) = 0.00995
    assert rows["a_range"].repeats_needed == 7 and "about 7 repeats per point would decide" in rows["a_range"].why
    assert rows["a_reduction"].repeats_needed > 7
    assert rows["a_speedup"].points == [one.id, two.id] and rows["a_speedup"].why.startswith("a speedup computed")
    low, high = rows["a_speedup"].ci  # Welch's t on the logs of both points' three runs
    assert 1.45 < low < 1.5 < high < 1.55 and rows["a_speedup"].ratio == pytest.approx(1.5 / 1.9)
    assert rows["a_speedup"].interval == "95 % Welch t interval on logs"
    low, high = rows["a_reduction"].ci  # the interval of a reduction is that of its ratio, mapped
    assert 0 < low < 100 / 3 < high < 100
    rate = summarize([150 / 1.01, 150.0, 151.5])  # a time is the samples over the rate: its interval, inverted
    assert rows["to_train"].ci == (pytest.approx(150 / rate.ci_high), pytest.approx(150 / rate.ci_low))
    assert rows["per_node"].ci == (pytest.approx(rate.ci_low), pytest.approx(rate.ci_high))  # one node
    assert rows["averaged"].why == "a ratio averaged over model: see dlrun compare"
    # a ratio of two systems needs the other system's points: listed, left to compare --by system
    between = spec.references[-1].model_copy(update={"derive": Derive(
        op="ratio", numerator={"system": "localhost"}, denominator={"system": "dgx2"})})
    assert evaluate(between, [one, two], "localhost").why == "a ratio between systems: see dlrun compare --by system"
    assert rows["other_unit"].why == "images/sec here, GB/s published"


def test_a_superlinear_point_is_left_out_of_the_published_verdicts(tmp_path, monkeypatch):
    """Two ranks at four times one rank's rate (a forged point, 200 % scaling efficiency): its runs answer no
    published number, and each row says why."""
    site = tmp_path / "site" / "experiments"
    site.mkdir(parents=True)
    (site / "refs.yaml").write_text(REFERENCES_EXPERIMENT)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("DLRUN_PATH", str(tmp_path / "site"))
    catalog = load_catalog(host=probe_host())
    spec = catalog.experiment("refs_check")
    store = Store(tmp_path / "results.sqlite")
    one, two = plan_points(catalog, spec, "localhost", where={}, repeats=None, local_image=None, store=store)
    for run_id, work, value in (("r1", one, 95.0), ("r2", one, 105.0), ("r3", two, 400.0)):
        TaggedStore(store.path, spec.id, work.id).add_run(_record(run_id, "ok", work.plan),
                                                          [_result(work.plan, value=value)])
    one.refresh(store)
    two.refresh(store)
    rows = {row.reference.id: row for row in compare_references(spec, [one, two], "localhost")}
    why = f"left out of the verdict: point {two.id} is implausible: scaling efficiency 200 % over {one.id} (above 120 %)"
    assert (rows["two_ranks"].verdict, rows["two_ranks"].measured, rows["two_ranks"].why) == ("implausible", None, why)
    assert rows["an_efficiency"].verdict == "implausible" and rows["an_efficiency"].why.endswith(why)
    # the 1-rank point stands (judged: inconclusive, as two repeats are too few to decide)
    assert (rows["one_rank"].verdict, rows["one_rank"].runs) == ("inconclusive", 2)
    assert len(two.stored) == 1  # the point keeps its run: left out of the verdicts, not forgotten


def test_until_stable_repeats_the_points_whose_interval_is_wide(catalog, tmp_path):
    from dlrun.reproduce.resume import StoredRun

    works = plan_points(catalog, catalog.experiment(SMOKE), "localhost", where={}, repeats=3, local_image=None,
                        store=Store(tmp_path / "none.sqlite"))
    steady, noisy = works
    steady.stored = [StoredRun(f"s{i}", "", {"throughput": v}) for i, v in enumerate((100.0, 100.1, 99.9))]
    noisy.stored = [StoredRun(f"n{i}", "", {"throughput": v}) for i, v in enumerate((60.0, 100.0, 140.0))]
    assert stability(steady).within(0.02) and not stability(noisy).within(0.02)
    steps = more_repeats(works, within=0.02, max_repeats=10)
    assert [(step.work.id, step.repeat) for step in steps] == [(noisy.id, 4)]
    noisy.stored += [StoredRun(f"n{i}", "", {"throughput": 100.0}) for i in range(3, 10)]
    assert more_repeats(works, within=0.02, max_repeats=10) == []  # at the most runs allowed
    two = plan_points(catalog, catalog.experiment(SMOKE), "localhost", where={}, repeats=1, local_image=None,
                      store=Store(tmp_path / "none.sqlite"))
    two[0].stored = [StoredRun("x", "", {"throughput": 100.0})]
    steps = more_repeats(two, within=0.5, max_repeats=2)  # no interval yet: one more of each, fewest runs first
    assert [(s.work.id, s.repeat) for s in steps] == [(two[1].id, 1), (two[0].id, 2)]
def test_reproduce_names_the_inconclusive_references_and_the_repeats_that_would_decide(dlrun_home, tmp_path,
                                                                                    monkeypatch):
    _refs_check(tmp_path, monkeypatch, {1: [100 / 1.01, 100.0, 101.0], 2: [150 / 1.01, 150.0, 151.5]},
                store_path=dlrun_home / "results.sqlite")
    proc = run_cli("reproduce", "refs_check", "--system", "localhost")
    assert proc.returncode == 1, proc.stdout + proc.stderr  # two_ranks, a_speedup and a_ratio are outside
    assert "0 run(s) to make, 6 already stored" in proc.stdout
    lines = proc.stderr.splitlines()
    assert "dlrun: 3 reference(s) outside their tolerance: two_ranks, a_speedup, a_ratio" in lines
    (inconclusive,) = [line for line in lines if "inconclusive" in line]
    needed = json.loads(run_cli("reproduce", "refs_check", "--system", "localhost", "--json").stdout)["references"]
    most = max(row["repeats_needed"] for row in needed if row["verdict"] == "inconclusive")
    assert inconclusive == ("dlrun: 2 reference(s) inconclusive, their interval not yet inside or outside the "
                            f"tolerance band: a_range, a_reduction; about {most} repeats per point would decide "
                            f"(--repeats {most})")


def test_fewer_than_three_repeats_are_inconclusive_and_say_so(tmp_path, monkeypatch):
    spec, one, two = _refs_check(tmp_path, monkeypatch, {1: [95.0, 105.0], 2: [150.0]})
    rows = {row.reference.id: row for row in compare_references(spec, [one, two], "localhost")}
    assert {ref_id: row.verdict for ref_id, row in rows.items() if row.verdict not in (
        "unit differs", "not measured", "derived")} == dict.fromkeys(
        ["one_rank", "two_ranks", "at_most", "a_range", "a_speedup", "a_gain", "an_efficiency", "a_reduction",
         "a_ratio", "per_node", "to_train"], "inconclusive")
    one_rank, speedup, two_ranks = rows["one_rank"], rows["a_speedup"], rows["two_ranks"]
    assert one_rank.ci is None and one_rank.interval == "too few repeats (2; an interval needs at least 3)"
    # two runs 10 % apart: a spread to project from; one run: none
    assert one_rank.repeats_needed is not None and one_rank.repeats_needed >= 3
    assert one_rank.why.startswith("too few repeats (2; an interval needs at least 3); about ")
    assert two_ranks.repeats_needed is None and two_ranks.why.endswith(
        "run at least 3 repeats per point to know the spread")
    assert speedup.ci is None and speedup.interval == "too few repeats (2 and 1; an interval needs at least 3 a side)"
    assert speedup.measured == pytest.approx(150 / (95 * 105) ** 0.5)


def test_missing_repeats_run_round_robin(catalog, tmp_path):
    works = plan_points(catalog, catalog.experiment(SMOKE), "localhost", where={}, repeats=3, local_image=None,
                        store=Store(tmp_path / "none.sqlite"))
    assert [(step.work.id, step.repeat) for step in schedule(works)] == [
        (SMOKE_POINTS[0], 1), (SMOKE_POINTS[1], 1), (SMOKE_POINTS[0], 2), (SMOKE_POINTS[1], 2),
        (SMOKE_POINTS[0], 3), (SMOKE_POINTS[1], 3)]
    works[0].stored = [object()] * 2  # type: ignore[list-item]  # resumed: the point behind catches up in turn
    steps = schedule(works)
    assert [(step.work.id, step.repeat, step.point_index, step.points) for step in steps] == [
        (SMOKE_POINTS[1], 1, 2, 2), (SMOKE_POINTS[1], 2, 2, 2), (SMOKE_POINTS[0], 3, 1, 2), (SMOKE_POINTS[1], 3, 2, 2)]
    assert [step.index for step in steps] == [1, 2, 3, 4] and {step.total for step in steps} == {4}


# ------------------------------------------------------------------------------------------ the smoke run
def _tagged_runs(home: Path) -> list[tuple[str, str, str]]:
    return _tagged_runs_of(home, SMOKE)


def _tagged_runs_of(home: Path, experiment: str) -> list[tuple[str, str, str]]:
    """(id, status, point) of every stored run of `experiment`, read-only."""
    path = home / "results.sqlite"
    if not path.exists():
        return []
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
            return conn.execute("SELECT id, status, point FROM runs WHERE experiment = ? ORDER BY created_at, id",
                                (experiment,)).fetchall()
    except sqlite3.OperationalError:  # created, tables not yet
        return []


@pytest.mark.mpi
@pytest.mark.slow
def test_smoke_scaling_runs_is_interrupted_and_resumes_without_rerunning(dlrun_home, tmp_path):
    """Two runs may start; the third one's job is held at its start by a gate the test controls, and Ctrl-C
    comes while it waits there: exactly two runs are stored ok and the third cancelled, however fast the
    machine."""
    gate = JobGate(tmp_path / "gate", tokens=2)
    first = subprocess.Popen([sys.executable, "-m", "dlrun.cli", "reproduce", SMOKE], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env={**os.environ, **gate.env()})
    try:
        wait_until(lambda: first.poll() is not None or gate.held(), "the third run's job held at the gate")
        assert first.poll() is None, first.communicate()
        assert [status for _, status, _ in _tagged_runs(dlrun_home)] == ["ok", "ok"]
        [held] = gate.held()
        wait_until((dlrun_home / "runs" / held / "job.json").is_file, "the held run's job record")
        first.send_signal(signal.SIGINT)
        out, err = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    assert first.returncode == 130, out + err
    assert f"`dlrun reproduce {SMOKE}` continues where it stopped" in err
    assert [(run_id, status) for run_id, status, _ in _tagged_runs(dlrun_home)][2:] == [
        (held.removeprefix(".staging-"), "cancelled")]

    before = _tagged_runs(dlrun_home)
    finished = [run_id for run_id, status, _ in before if status == "ok"]
    assert len(finished) == 2 and len(before) == 3, before
    assert not list((dlrun_home / "runs").glob(".staging-*")), "the interrupted run left its staging directory"

    second = _json("reproduce", SMOKE)
    assert len(second["runs"]) == 6 - len(finished) and {run["status"] for run in second["runs"]} == {"ok"}
    assert not second["interrupted"] and second["not_run"] == []
    points = {point["point"]: point for point in second["points"]}
    assert set(points) == set(SMOKE_POINTS)
    for point in points.values():
        assert point["runs"] == 3 and len(point["run_ids"]) == 3
        assert point["metrics"]["throughput"]["n"] == 3 and point["metrics"]["throughput"]["unit"] == "images/sec"
    after = _tagged_runs(dlrun_home)
    ok_after = [run_id for run_id, status, _ in after if status == "ok"]
    assert len(ok_after) == 6 and set(finished) <= set(ok_after)  # nothing finished was run again
    assert set(ok_after) == {run_id for point in points.values() for run_id in point["run_ids"]}
    assert {run["run_id"] for run in second["runs"]} == set(ok_after) - set(finished)
    scaling = second["comparisons"]
    assert [(c["mode"], c["like_for_like"]) for c in scaling] == [("scaling", True)]
    rows = {row["devices"]: row for row in scaling[0]["rows"]}
    assert sorted(rows) == [1, 2] and all(row["n"] == 3 for row in rows.values())
    assert set(rows[1]["runs"]) | set(rows[2]["runs"]) == set(ok_after)
    assert rows[1]["speedup"] == 1.0 and rows[2]["speedup"] == pytest.approx(rows[2]["geomean"] / rows[1]["geomean"])
    assert rows[2]["scaling_efficiency"] == pytest.approx(rows[2]["speedup"] / 2)
    assert rows[2]["speedup_low"] <= rows[2]["speedup"] <= rows[2]["speedup_high"]  # the interval is there

    third = run_cli("reproduce", SMOKE)
    assert third.returncode == 0, third.stderr
    assert "0 run(s) to make, 6 already stored" in third.stdout
    assert "localhost_scaling_smoke on localhost: stored results per point" in third.stdout
    assert third.stdout.count("3/3") == 2
    assert "compare scaling: localhost_scaling_smoke: scaling from 1 device (images/sec)" in third.stdout
    for column in ("95 % CI", "speedup", "scaling eff."):
        assert column in third.stdout
    assert len(_tagged_runs(dlrun_home)) == len(after)
    _smoke_report(dlrun_home.parent, rows)


def _smoke_report(tmp: Path, rows: dict) -> None:
    """`dlrun report` of the resumed experiment: the speedup/efficiency table with intervals, the log-log
    plot, and the page as headless Chromium renders it."""
    out = tmp / "report"
    made = run_cli("report", "--experiment", SMOKE, "--out", str(out))
    assert made.returncode == 0, made.stdout + made.stderr
    page = read(out)
    points = {key: row for key, row in page.rows.items() if key.startswith("pt-")}
    assert len(points) == 2 and "like-for-like" in page.ids and f"experiment-{SMOKE}" in page.ids
    two = re.search(r'<tr id="pt-2"[^>]*>(.*?)</tr>', page.text, re.S).group(1)
    cells = re.findall(r"<td>(.*?)</td>", two, re.S)
    speedup, efficiency = (f"{rows[2]['speedup']:,.2f} [{rows[2]['speedup_low']:,.2f}, {rows[2]['speedup_high']:,.2f}]",
                           f"{rows[2]['scaling_efficiency'] * 100:.1f} %")
    assert speedup in cells and any(cell.startswith(efficiency + " [") for cell in cells), cells
    assert {f"run-{run_id}" for row in rows.values() for run_id in row["runs"]} <= set(page.rows)
    image = page.images[0]
    assert image["src"] == "scaling.png"
    check_png(out / "scaling.png", int(image["width"]), int(image["height"]))
    check_in_browser(out, tmp, page)


# ------------------------------------------------------------------------------------------ a batch system
CLUSTER_EXPERIMENT = """\
id: testcluster_nodes
title: "trivial on 1 and 2 nodes of the test Slurm cluster"
document: {name: "dlrun", title: "dlrun's test suite", authors: "the dlrun project"}
where: "tests/test_reproduce.py"
description: "Two points a batch scheduler runs: reproduce submits every run at once, then collects them."
measure: training
device: cpu
systems: [dlrun-testcluster]
axes:
  - name: model
    values: [trivial]
  - name: nodes
    values: [1, 2]
run: {steps: 2, warmup_steps: 1, repeats: 2, why: "as short as a run can be"}
status: {kind: runnable}
"""


def _squeue(cluster) -> list[str]:
    return cluster.run("squeue", "-h", "-o", "%i").stdout.split()


def _scontrol(cluster, *args: str) -> None:
    done = cluster.run("scontrol", *args)
    assert done.returncode == 0, f"scontrol {' '.join(args)}: {done.stderr}"


@pytest.mark.slurm
@pytest.mark.slow
def test_batch_points_are_submitted_at_once_cancelled_on_sigint_and_resumed(slurm_cluster, dlrun_home, tmp_path):
    """The test decides which jobs may run: the partition is down while reproduce submits (jobs queue, none
    starts), then every job but one is held and the partition brought up, so exactly one run ends `ok` before
    Ctrl-C and three are cancelled at the scheduler, however fast or slow the machine."""
    from fixtures_slurm import CLUSTER_SYSTEM

    assert CLUSTER_SYSTEM == "dlrun-testcluster"
    site = tmp_path / "site" / "experiments"
    site.mkdir(parents=True)
    (site / "testcluster.yaml").write_text(CLUSTER_EXPERIMENT)
    env = {**slurm_cluster.env, "DLRUN_PATH": f"{slurm_cluster.catalog}{os.pathsep}{tmp_path / 'site'}"}
    assert _squeue(slurm_cluster) == []

    _scontrol(slurm_cluster, "update", "PartitionName=debug", "State=DOWN")
    first = subprocess.Popen([sys.executable, "-m", "dlrun.cli", "reproduce", "testcluster_nodes"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **env})
    try:
        wait_until(lambda: first.poll() is not None or len(_squeue(slurm_cluster)) == 4, "four jobs submitted")
        assert first.poll() is None, first.communicate()
        jobs = _squeue(slurm_cluster)
        assert len(jobs) == 4, "all four runs (2 points x 2 repeats) are submitted before any is collected"
        wait_until(lambda: len(list((dlrun_home / "runs").glob(".staging-*/job.json"))) == 4, "four job records")
        runs_first, held = jobs[0], jobs[1:]
        _scontrol(slurm_cluster, "hold", *held)
        _scontrol(slurm_cluster, "update", "PartitionName=debug", "State=UP")
        wait_until(lambda: first.poll() is not None or any(status == "ok" for _, status, _ in
                                                      _tagged_runs_of(dlrun_home, "testcluster_nodes")),
              f"slurm job {runs_first} collected")
        assert first.poll() is None, first.communicate()
        assert sorted(_squeue(slurm_cluster)) == sorted(held)
        first.send_signal(signal.SIGINT)
        out, err = first.communicate(timeout=300)
    finally:
        _scontrol(slurm_cluster, "update", "PartitionName=debug", "State=UP")
        if first.poll() is None:
            first.kill()
            first.communicate()
    assert first.returncode == 130, out + err
    assert _squeue(slurm_cluster) == [], "every submitted job was cancelled at its scheduler"
    before = [(run_id, status) for run_id, status, _ in _tagged_runs_of(dlrun_home, "testcluster_nodes")]
    assert sorted(status for _, status in before) == ["cancelled", "cancelled", "cancelled", "ok"], before
    assert not list((dlrun_home / "runs").glob(".staging-*"))

    proc = run_cli("reproduce", "testcluster_nodes", "--json", env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    second = json.loads(proc.stdout)
    [finished] = [run_id for run_id, status in before if status == "ok"]
    assert len(second["runs"]) == 3 and {run["status"] for run in second["runs"]} == {"ok"}
    points = {point["point"]: point["run_ids"] for point in second["points"]}
    assert {point: len(ids) for point, ids in points.items()} == {"model=trivial nodes=1": 2,
                                                                  "model=trivial nodes=2": 2}
    assert finished in {run_id for ids in points.values() for run_id in ids}
    assert proc.stderr.count("dlrun: submitted slurm job") == 3


@pytest.mark.slow
@pytest.mark.slow
def test_until_stable_runs_again_until_the_most_runs_allowed(dlrun_home):
    """Two runs per point are too few for an interval: after the one run each point asks for, one more
    round runs each point again, and the rounds stop at --max-repeats."""
    proc = run_cli("reproduce", SMOKE, "--repeats", "1", "--until-stable", "--max-repeats", "2", "--json",
                   timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stderr.count("until stable: 2 more run(s), one per point whose interval is wider than ±2 %") == 1
    data = json.loads(proc.stdout)
    assert sorted((run["point"], run["status"]) for run in data["runs"]) == sorted(
        [(point, "ok") for point in SMOKE_POINTS] * 2)
    assert [len(point["run_ids"]) for point in data["points"]] == [2, 2]
    bad = run_cli("reproduce", SMOKE, "--until-stable", "--max-repeats", "0")
    assert bad.returncode == 2 and "--max-repeats must be a positive integer, got 0" in bad.stderr
