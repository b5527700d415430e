"""`compare` on stored runs with chosen values: each mode's numbers (geometric means and Welch's t on the
logs, checked against `scipy.stats` through compare_data's helpers), the like-for-like guard and its
--allow-mismatch marking. Real SQLite stores; the CLI as a user runs it."""
from __future__ import annotations

import csv
import io
import json
import re
from types import SimpleNamespace

import pytest
from compare_data import add, around, on_logs, welch_on_logs
from conftest import run_cli

from dlrun.errors import UsageError
from dlrun.measure import matmul_record
from dlrun.results.compare import EfficiencyInputs, MismatchError, Reference, Source, compare
from dlrun.results.compare.efficiency import ModelFlops, Peak, SystemFacts, system_facts
from dlrun.results.store.query import Filters
from dlrun.results.store import Store



@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("DLRUN_SITE", "here")
    return Store(tmp_path / "results.sqlite")


def _ren_table3(store):
    """Ren et al. Table III's shape: two systems, two models, 1 and 2 GPUs, 3 repeats each around (geometric
    means of) the values below."""
    for model, workload, devices, dgx2, rtx in (
            ("resnet50_v1.5", "resnet50", 1, 100, 68),      # 68 / 100 = 0.68
            ("resnet50_v1.5", "resnet50", 2, 200, 125),     # 125 / 200 = 0.625
            ("alexnet", "alexnet", 1, 500, 390),            # 390 / 500 = 0.78
            ("alexnet", "alexnet", 2, 1000, 630)):          # 630 / 1000 = 0.63
        add(store, around(dgx2, 1.02), workload=workload, model=model, devices=devices, system="dgx2")
        add(store, around(rtx, 1.01), workload=workload, model=model, devices=devices, system="rtx-ts4")


def test_relative_throughput_between_systems_in_the_shape_of_ren_table3(store):
    _ren_table3(store)
    result = compare(store, Filters(), by="system", baseline="dgx2")
    assert result.mode == "relative" and result.like_for_like and result.baseline == "dgx2"
    cells = {(r["workload"], r["devices"]): r for r in result.rows}
    assert {k: round(r["relative"], 12) for k, r in cells.items()} == {
        ("alexnet", 1): 0.78, ("alexnet", 2): 0.63, ("resnet50", 1): 0.68, ("resnet50", 2): 0.625}
    row = cells[("resnet50", 1)]
    assert (row["system"], row["n"], row["baseline_n"]) == ("rtx-ts4", 3, 3)
    assert (row["geomean"], row["baseline_geomean"]) == (pytest.approx(68), pytest.approx(100))
    welch = welch_on_logs(around(100, 1.02), around(68, 1.01))
    assert row["relative"] == pytest.approx(welch["ratio"], rel=1e-12)
    assert (row["relative_low"], row["relative_high"]) == (pytest.approx(welch["low"]), pytest.approx(welch["high"]))
    assert row["interval"] == "95 % Welch t interval on logs"
    # a column's average is the geometric mean of its ratios
    averages = {r["devices"]: (r["workload"], r["relative"]) for r in result.summary_rows}
    assert averages == {1: ("geometric mean", pytest.approx((0.68 * 0.78) ** 0.5)),
                        2: ("geometric mean", pytest.approx((0.625 * 0.63) ** 0.5))}


def test_two_sites_with_the_same_system_profile(store):
    add(store, [98, 100, 102], devices=2, site="llsc.mit.edu")
    add(store, [94, 95, 96], devices=2, site="bnl.gov")
    result = compare(store, Filters(), by="site", baseline="llsc.mit.edu")
    assert result.mode == "relative" and result.like_for_like
    (row,) = result.rows
    assert (row["site"], row["baseline"], row["relative"]) == ("bnl.gov", "llsc.mit.edu",
                                                               pytest.approx(0.95, rel=1e-4))
    tested = compare(store, Filters(), by="site", mode="regression", baseline="llsc.mit.edu")
    assert tested.rows[0]["verdict"].startswith("slower by 5.0 % (95 % CI ")


def test_different_batch_sizes_are_refused_then_compared_and_marked(store):
    _ren_table3(store)
    add(store, [50, 51, 52], devices=1, system="rtx-ts4", batch=32)
    with pytest.raises(MismatchError) as refused:
        compare(store, Filters(), by="system")
    assert refused.value.differences == [
        "batch per device: 32 (3 runs) ≠ 64 (24 runs)",
        "global batch: 32 (3 runs) ≠ 64 (6 runs) (in the row workload resnet50, model resnet50_v1.5, devices 1)"]
    assert "compare them anyway with --allow-mismatch" in str(refused.value)
    result = compare(store, Filters(), by="system", allow_mismatch=True)
    assert not result.like_for_like and result.to_dict()["like_for_like"] is False
    pooled = next(r for r in result.rows if r["workload"] == "resnet50" and r["devices"] == 1)
    assert pooled["n"] == 6
    assert pooled["relative"] == pytest.approx(welch_on_logs(around(100, 1.02), around(68, 1.01) + [50, 51, 52])["ratio"])


def test_scaling_table_with_intervals_and_efficiency_columns(store):
    add(store, [99, 100, 101], devices=1)
    add(store, [189, 190, 191], devices=2)
    add(store, [350, 360, 370], devices=4)
    run, rows = matmul_record("dgx2", "fp32", {"metric": "matmul", "value": 14000.0, "unit": "GFLOP/s",
                                               "dtype": "float32", "size": 8192, "repeats": 7, "threads": 1,
                                               "device": "cuda", "framework": "pytorch",
                                               "framework_version": "2.13.0"}, now=1.7e9)
    store.add_run(run, rows)
    facts = SystemFacts("dgx2", gpus_per_node=16, sockets=2,
                        peaks={"fp32": Peak(15.7, "fp32", "Ren et al. (BNL), Sec. II-A")})
    inputs = EfficiencyInputs(systems={"dgx2": facts},
                              models={"resnet50_v1.5": ModelFlops(4.089e9, "counted on dlrun's harness model")})
    result = compare(store, Filters(workload=("resnet50",)), by="devices", facts=lambda keys: inputs)
    assert result.mode == "scaling" and result.baseline == 1 and result.like_for_like
    one, two, four = result.rows
    assert (one["speedup"], one["speedup_low"], one["scaling_efficiency"]) == (1.0, None, 1.0)
    assert one["speedup_interval"] == "the baseline: 1 by definition"
    g1, low1, high1 = on_logs([99, 100, 101])
    assert (one["geomean"], one["stdev"], one["ci_low"], one["ci_high"]) == (
        pytest.approx(g1), 1, pytest.approx(low1), pytest.approx(high1))
    welch = welch_on_logs([99, 100, 101], [189, 190, 191])
    assert (two["speedup"], two["ideal"], two["scaling_efficiency"]) == (
        pytest.approx(welch["ratio"]), 2.0, pytest.approx(welch["ratio"] / 2))
    assert (two["speedup_low"], two["speedup_high"]) == (pytest.approx(welch["low"]), pytest.approx(welch["high"]))
    assert two["scaling_efficiency_low"] == pytest.approx(two["speedup_low"] / 2)
    assert (four["speedup"], four["scaling_efficiency"]) == (pytest.approx(3.6, rel=1e-3), pytest.approx(0.9, rel=1e-3))
    assert four["ci_high"] == pytest.approx(on_logs([350, 360, 370])[2])
    # 6 x 4.089 GFLOP per image x 99.997 img/s (the geometric mean) = 2453.3 GFLOP/s, against 15.7 TFLOP/s
    # and 14 TFLOP/s per GPU
    assert one["achieved_gflops"] == pytest.approx(6 * 4.089 * g1)
    assert one["of_peak"] == pytest.approx(6 * 4.089 * g1 / 15700)
    assert one["of_matmul"] == pytest.approx(6 * 4.089 * g1 / 14000)
    assert two["of_peak"] == pytest.approx(6 * 4.089 * on_logs([189, 190, 191])[0] / 31400)
    assert any("peak of dgx2: 15.7 TFLOP/s fp32 per GPU (Ren et al. (BNL), Sec. II-A)" in n for n in result.notes)


def test_two_fabrics_relative_difference_and_its_average_as_samsi(store):
    add(store, [99, 100, 101], system="txgaia", devices=4, nodes=2, fabric="opa")
    add(store, [87, 88, 89], system="txgaia", devices=4, nodes=2, fabric="roce")
    add(store, [198, 200, 202], system="txgaia", devices=8, nodes=4, fabric="opa")
    add(store, [179, 180, 181], system="txgaia", devices=8, nodes=4, fabric="roce")
    result = compare(store, Filters(), by="fabric", baseline="opa")
    assert result.mode == "fabrics" and result.like_for_like
    four, eight = result.rows
    # 88 vs 100: -12 %, with Welch's interval and test on the logs
    welch = welch_on_logs([99, 100, 101], [87, 88, 89])
    assert four["change_pct"] == pytest.approx((welch["ratio"] - 1) * 100) == pytest.approx(-12.0, abs=0.01)
    assert (four["change_low_pct"], four["change_high_pct"]) == (pytest.approx((welch["low"] - 1) * 100),
                                                                 pytest.approx((welch["high"] - 1) * 100))
    assert (four["welch_dof"], four["p_value"]) == (pytest.approx(welch["dof"]), pytest.approx(welch["p"]))
    assert four["verdict"] == "slower by 12.0 % (95 % CI 9.8–14.1 %, p = 0.00014)" and four["significant"]
    assert eight["change_pct"] == pytest.approx(-10.0, abs=0.01)
    assert eight["welch_dof"] == pytest.approx(welch_on_logs([198, 200, 202], [179, 180, 181])["dof"])
    # Samsi et al.'s average reduction, as the geometric mean of the rows' ratios
    (average,) = result.summary_rows
    assert (average["workload"], average["model"], average["fabric"], average["baseline"]) == (
        "geometric mean", "2 rows", "roce", "opa")
    assert average["ratio"] == pytest.approx((four["ratio"] * eight["ratio"]) ** 0.5)
    assert average["change_pct"] == pytest.approx(-11.0, abs=0.02)


def _images(store, new_values):
    add(store, [208.1, 205.3, 210.4, 207.7, 206.9], system="localhost", image="pytorch-2.12",
        digest="sha256:" + "b" * 64, version="2.12.0")
    add(store, new_values, system="localhost", image="pytorch-2.13")


def test_regression_between_two_images_says_slower_with_its_interval(store):
    _images(store, [199.2, 201.5, 197.8, 200.9, 198.4])
    result = compare(store, Filters(), by="image", baseline="pytorch-2.12")
    assert result.mode == "regression" and result.baseline == "pytorch-2.12 (sha256:bbbbbbbbbbbb)"
    (row,) = result.rows
    assert row["image"] == "pytorch-2.13 (sha256:aaaaaaaaaaaa)"
    assert row["verdict"] == "slower by 3.9 % (95 % CI 2.7–5.1 %, p = 7.9e-05)"
    welch = welch_on_logs([208.1, 205.3, 210.4, 207.7, 206.9], [199.2, 201.5, 197.8, 200.9, 198.4])
    assert row["p_value"] == pytest.approx(welch["p"], rel=1e-9)
    assert row["welch_dof"] == pytest.approx(welch["dof"], rel=1e-10)
    assert row["change_pct"] == pytest.approx((welch["ratio"] - 1) * 100)
    assert (row["ratio_low"], row["ratio_high"]) == (pytest.approx(welch["low"]), pytest.approx(welch["high"]))
    # the test and the interval are one computation: significant, and the interval excludes 1
    assert row["significant"] and row["ratio_high"] < 1 and row["interval"] == "95 % Welch t interval on logs"
    by_digest = compare(store, Filters(), by="image", baseline="sha256:bbbbbbbbbbbb")
    assert by_digest.rows[0]["verdict"] == row["verdict"]


def test_regression_without_a_difference(store):
    _images(store, [207.0, 211.2, 204.9, 209.8, 206.1])
    (row,) = compare(store, Filters(), by="image", baseline="pytorch-2.12").rows
    assert row["verdict"] == "no significant difference (p = 0.94; 95 % CI -1.6 % to +1.7 %)"
    assert row["significant"] is False and row["ratio_low"] < 1 < row["ratio_high"]


PRACE = Source("PRACE Best Practice Guide - Deep Learning", "Sec. 6.3.4, Table 8",
               "Throughput in images/second as function of the number of GPUs.")


def _table8(**conditions):
    return [Reference(182, "img/s", 0.05, PRACE, match={"devices": 1}, conditions=conditions, label="1 GPU"),
            Reference(705, "img/s", 0.05, PRACE, match={"devices": 4}, conditions=conditions, label="4 GPUs")]


def test_runs_against_published_values(store):
    add(store, [178, 180, 182], devices=1)
    add(store, [590, 600, 610], devices=4)
    result = compare(store, Filters(), references=_table8(precision="fp32", batch_per_device=64))
    assert result.mode == "reference" and result.like_for_like
    one, four = result.rows
    g1, low1, high1 = on_logs([178, 180, 182])  # 175.1 .. 185.0 inside 182 ± 5 % = 172.9 .. 191.1
    assert (one["reference"], one["ratio"], one["verdict"]) == (182, pytest.approx(g1 / 182), "within")
    assert (one["ratio_low"], one["ratio_high"]) == (pytest.approx(low1 / 182), pytest.approx(high1 / 182))
    g4, low4, high4 = on_logs([590, 600, 610])  # 575.1 .. 625.6, wholly below 705 - 5 % = 669.75
    assert (four["ratio"], four["verdict"], four["deviation_pct"]) == (
        pytest.approx(g4 / 705), "outside", pytest.approx((g4 / 705 - 1) * 100))
    assert four["repeats_needed"] is None and one["verdict_why"] == "the interval lies inside the tolerance band"
    assert (one["source_doc"], one["source_where"], one["source_quote"]) == (PRACE.doc, PRACE.where, PRACE.quote)


def test_a_reference_verdict_is_inconclusive_until_the_interval_decides(store):
    # 180 ± 4 % on three repeats: the interval (about 164 .. 199) is wider than 182 ± 5 % (172.9 .. 191.1)
    add(store, [173, 180, 187], devices=1)
    add(store, [171, 182], devices=4)  # two repeats: no interval at all
    result = compare(store, Filters(), references=_table8(precision="fp32", batch_per_device=64))
    three, two = result.rows
    assert three["verdict"] == "inconclusive" and three["repeats_needed"] > 3
    assert three["verdict_why"].startswith("the interval straddles an edge of the tolerance band; about ")
    assert (two["verdict"], two["ci_low"], two["interval"]) == (
        "inconclusive", None, "too few repeats (2; an interval needs at least 3)")


def test_a_reference_run_under_other_conditions_is_refused(store):
    add(store, [178, 180, 182], devices=1)
    with pytest.raises(MismatchError) as refused:
        compare(store, Filters(), references=_table8(data="real:imagenet", framework="mxnet"))
    assert refused.value.differences == [
        "data: synthetic here, real:imagenet in PRACE Best Practice Guide - Deep Learning",
        "framework: pytorch here, mxnet in PRACE Best Practice Guide - Deep Learning"]
    marked = compare(store, Filters(), references=_table8(data="real:imagenet"), allow_mismatch=True)
    assert not marked.like_for_like and marked.rows[0]["verdict"] == "within"


def test_mixed_precisions_are_not_repeats_of_one_configuration(store):
    add(store, [99, 100, 101], devices=1)
    add(store, [190, 191], devices=1, precision="amp")
    add(store, [189, 190, 191], devices=2)
    with pytest.raises(MismatchError, match=r"precision: amp\(bfloat16\) \(2 runs\) ≠ fp32 \(6 runs\)"):
        compare(store, Filters(), by="devices")
    summary = compare(store, Filters())  # statistics per configuration compare nothing: no guard
    assert sorted((r["precision"], r["devices"], r["n"]) for r in summary.rows) == [
        ("amp(bfloat16)", 1, 2), ("fp32", 1, 3), ("fp32", 2, 3)]


def test_bus_bandwidth_against_what_the_fabric_carries(store):
    add(store, [10.0, 10.2, 9.8], metric="busbw", system="txgaia", devices=2, nodes=2, fabric="opa")
    inputs = EfficiencyInputs(systems={"txgaia": SystemFacts("txgaia", 2, 2, fabrics={"opa": (1, 100.0)})})
    (row,) = compare(store, Filters(), facts=lambda keys: inputs).rows
    assert (row["unit"], row["fabric_gbs"]) == ("GB/s", 12.5)
    assert row["of_fabric"] == pytest.approx(on_logs([10.0, 10.2, 9.8])[0] / 12.5)
    assert row["model"] == "all_reduce" and row["batch_per_device"] == "n/a"


def test_efficiency_inputs_from_a_system_profile(monkeypatch):
    from dlrun.catalog import load_catalog
    from dlrun.catalog import models as catalog

    txgaia = system_facts(load_catalog().systems["txgaia"])
    assert txgaia.gpus_per_node == 2 and {f: speed for f, (_, speed) in txgaia.fabrics.items()} == \
        {"opa": 100.0, "roce": 25.0}
    # Peak rates are optional fields of system profiles: a GPU's list of {precision, tflops, source} and the
    # catalog's chooser of the one a run precision counts against (fp32 -> fp32; amp -> half on tensor
    # cores). Stand-ins of that shape, until the profiles carry them:
    rate = SimpleNamespace(precision="fp16-tensor", tflops=112.0,
                           source=SimpleNamespace(doc="NVIDIA Tesla V100 datasheet", where="V100 PCIe"))
    monkeypatch.setattr(catalog, "peak_for", lambda rates, precision: rates[0] if precision == "amp" else None,
                        raising=False)
    spec = SimpleNamespace(name="v100box", gpus=SimpleNamespace(peak=[rate]), cpu=SimpleNamespace(sockets=2),
                           gpus_per_node=2, fabric_config={"ib": SimpleNamespace(speed_gbps=100.0, links=2)})
    facts = system_facts(spec)
    assert facts.peaks == {"amp": Peak(112.0, "fp16-tensor", "NVIDIA Tesla V100 datasheet, V100 PCIe")}
    assert facts.fabrics == {"ib": (2, 100.0)}


@pytest.mark.parametrize("kwargs, message", [
    ({"by": "sytem"}, "unknown axis (--by) 'sytem'; did you mean 'system'?"),
    ({"mode": "scaling", "by": "system"}, "--mode scaling compares along devices, not --by system; "
                                          "--by system works with --mode relative or regression"),
    ({"mode": "reference"}, "--mode reference needs a published value"),
    ({"by": "devices", "baseline": "3"}, "bad --baseline '3': no selected run has that devices; "
                                         "did you mean '2'? valid: 1, 2"),
    ({"baseline": "1"}, "--baseline needs an axis to pick from; --mode summary has none"),
])
def test_bad_mode_axis_and_baseline_are_usage_errors(store, kwargs, message):
    add(store, [1.0, 2.0], devices=1)
    add(store, [3.0, 4.0], devices=2)
    with pytest.raises(UsageError, match=re.escape(message)):
        compare(store, Filters(), **kwargs)


@pytest.fixture
def home(dlrun_home, monkeypatch):
    monkeypatch.setenv("DLRUN_SITE", "here")
    _ren_table3(Store(dlrun_home / "results.sqlite"))
    return {"DLRUN_HOME": str(dlrun_home), "DLRUN_SITE": "here"}


def test_cli_prints_the_relative_table_and_refuses_a_mismatch(home, dlrun_home):
    proc = run_cli("compare", "--by", "system", "--baseline", "dgx2", env=home)
    assert proc.returncode == 0, proc.stderr
    assert "compare relative: throughput relative to dgx2 (images/sec)" in proc.stdout
    # resnet50 on 1 GPU, and the geometric mean of the column (0.68 and 0.78)
    assert "68.00 %" in proc.stdout and "72.83 %" in proc.stdout and "n=3/3" in proc.stdout  # n per side
    assert "ratio of geometric means" in proc.stdout and "95 % CI" in proc.stdout
    add(Store(dlrun_home / "results.sqlite"), [50.0, 51.0], devices=1, system="rtx-ts4", precision="amp")
    refused = run_cli("compare", "--by", "system", env=home)
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.splitlines() == [
        "dlrun: error: the runs are not like-for-like (1 difference):",
        "  precision: amp(bfloat16) (2 runs) ≠ fp32 (24 runs)",
        "compare them anyway with --allow-mismatch (the output is then marked 'not like-for-like')"]
    marked = run_cli("compare", "--by", "system", "--allow-mismatch", "--json", env=home)
    data = json.loads(marked.stdout)
    assert data["like_for_like"] is False and data["differences"] == ["precision: amp(bfloat16) (2 runs) ≠ fp32 (24 runs)"]
    table = run_cli("compare", "--by", "system", "--allow-mismatch", env=home).stdout
    assert "[NOT LIKE-FOR-LIKE]" in table and "not like-for-like (compared anyway, --allow-mismatch):" in table


def test_cli_csv_and_bad_values(home):
    proc = run_cli("compare", "--by", "system", "--csv", "--workload", "alexnet", env=home)
    rows = list(csv.DictReader(io.StringIO(proc.stdout)))
    assert [(r["row_kind"], r["devices"], round(float(r["relative"]), 6), r["like_for_like"]) for r in rows] == [
        ("row", "1", 0.78, "True"), ("row", "2", 0.63, "True"), ("average", "1", 0.78, "True"),
        ("average", "2", 0.63, "True")]
    assert rows[0]["interval"] == "95 % Welch t interval on logs" and rows[0]["n"] == rows[0]["baseline_n"] == "3"
    for args, message in ((["--workload", "alexnett"], "bad --workload 'alexnett': no stored run has it; "
                                                       "did you mean 'alexnet'?"),
                          (["--by", "fabrik"], "unknown axis (--by) 'fabrik'; did you mean 'fabric'?"),
                          (["--by", "system", "--baseline", "dgx-2"], "bad --baseline 'dgx-2': no selected run "
                                                                       "has that system; did you mean 'dgx2'?"),
                          (["--json", "--csv"], "--json and --csv exclude each other")):
        bad = run_cli("compare", *args, env=home)
        assert bad.returncode == 2 and bad.stdout == ""
        assert bad.stderr.count("\n") == 1 and bad.stderr.startswith(f"dlrun: error: {message}"), bad.stderr


def test_cli_reference_file(home, tmp_path):
    path = tmp_path / "table3.yaml"
    path.write_text("- value: 100\n  unit: images/sec\n  tolerance_pct: 10\n"
                    "  source: {doc: Made-up paper, where: Table 1, quote: '100 img/s'}\n"
                    "  match: {workload: resnet50, devices: 1}\n")
    data = json.loads(run_cli("compare", "--system", "dgx2", "--references", str(path), "--json", env=home).stdout)
    (row,) = data["rows"]
    # 98.04, 100, 102 img/s: the interval 95.2 .. 105.04 lies inside 100 ± 10 % (not inside ± 5 %)
    assert (row["ratio"], row["verdict"], row["source_quote"]) == (pytest.approx(1.0), "within", "100 img/s")
    assert data["statistics"]["estimate"] == "geometric mean of the repeats" and data["statistics"]["confidence"] == 0.95
    table = run_cli("compare", "--system", "dgx2", "--references", str(path), env=home).stdout
    assert "within (±10 %)" in table and "geo. mean" in table and "95 % CI" in table
    path.write_text("- value: 100\n  unit: images/sec\n  tolerance_pct: 1\n"
                    "  source: {doc: Made-up paper, where: Table 1, quote: '100 img/s'}\n"
                    "  match: {workload: resnet50, devices: 1}\n")
    (tight,) = json.loads(run_cli("compare", "--system", "dgx2", "--references", str(path), "--json",
                                  env=home).stdout)["rows"]
    # a spread of 2 % a repeat needs about 18 repeats for an interval inside ± 1 %
    assert (tight["verdict"], tight["repeats_needed"]) == ("inconclusive", 18)
    assert "inconclusive" in run_cli("compare", "--system", "dgx2", "--references", str(path), env=home).stdout
    path.write_text("- value: 100\n  unit: images/sec\n  tolerance: 5\n  source: {doc: x}\n")
    bad = run_cli("compare", "--references", str(path), env=home)
    assert bad.returncode == 2 and "reference 1: unknown field 'tolerance'; did you mean 'tolerance_pct'?" in bad.stderr


def test_model_counts_are_counted_once_and_kept_per_harness(tmp_path, monkeypatch):
    from dlrun.harness import CACHE_NAME, counted_models

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert counted_models({"trivial", "no-such-model"}) == {"trivial": {"forward_macs": 229184, "params": 9232}}
    path = tmp_path / "dlrun" / CACHE_NAME
    cached = json.loads(path.read_text())
    assert cached["models"]["no-such-model"] is None and cached["harness_sha256"].startswith("sha256:")
    cached["models"]["trivial"]["forward_macs"] = 1  # a later call reads the cache, not the model
    path.write_text(json.dumps(cached))
    assert counted_models({"trivial"})["trivial"]["forward_macs"] == 1
    cached["harness_sha256"] = "sha256:another-harness"
    path.write_text(json.dumps(cached))
    assert counted_models({"trivial"})["trivial"]["forward_macs"] == 229184  # a changed harness is counted again
