"""Experiments of the seeds as data: all load, every reference carries its source, the matrices expand into
the points (and skips) the papers' settings imply, and bad files say path:line: field: message."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_cli

from dlrun.catalog import CatalogError, load_catalog
from dlrun.catalog.experiment_points import effective_status, expand
from dlrun.catalog.experiment_tables import LIST_COLUMNS, experiment_data, experiment_rows, list_table, show_rows
from dlrun.catalog.experiment_vocabulary import MEASURED_METRICS
from dlrun.catalog.experiments import ExperimentSpec, Status, Tolerance
from dlrun.catalog.loader import load_file
from dlrun.catalog.models import peak_for
from dlrun.plan import resolve_plan
from dlrun.render import render_job

# The experiment ids of the seeds' structured extraction (its `experiments:` section), 26 in all.
SEED_EXPERIMENTS = {
    "E000_fabric_dl_throughput", "E000_allreduce_strategies", "E000_cartdg_strong_scaling", "E000_pcie_affinity",
    "E000_pytorch_fabric",
    "E001_nccl_bus_bandwidth", "E001_large_models_fp32", "E001_high_throughput_models_fp32",
    "E001_cpu_dataloader_sweep", "E001_mixed_precision_resnet50", "E001_dataparallel_vs_ddp",
    "E002_storage_and_overall", "E002_dd_read", "E002_scale_up_single_node", "E002_nvlink_bandwidth_and_volume",
    "E002_scale_out_workers", "E002_scale_out_ps", "E002_data_format", "E002_batch_size_single_node",
    "E002_batch_size_distributed",
    "EG_uc61_futuregan_dataparallel", "EG_uc62_resnet50_intelcaffe_448", "EG_uc63_resnet50_mxnet_1080ti",
    "EG_uc63_resnet50_pytorch_horovod_1080ti", "EG_uc64_resnet50_vgg16_zenith", "EG_fig11_mi25_vs_titanv",
}
# Today's LLM pretraining references (issue 21): NVIDIA's published tables, not the seeds'.
LLM_EXPERIMENTS = {"EL_dgxc_llama31_8b_bf16", "EL_megatron_bridge_llama3_8b_fp8"}
# dlrun's own experiments: no document behind them, no published numbers.
DLRUN_OWN = {"localhost_scaling_smoke"}
DOCUMENTS = {"Samsi et al. (MIT TX-GAIA)", "Ren et al. (BNL)", "Han et al. (ORNL Summitdev)",
             "PRACE Best Practice Guide - Deep Learning", "NVIDIA DGX Cloud Benchmarking Recipes",
             "NVIDIA Megatron-Bridge performance summary"}
# Ren et al. (BNL), Table II: parameters and operations per instance, as printed.
TABLE_II = {"AlexNet": (61.10e6, 0.72e9), "ResNet18": (11.69e6, 1.83e9), "ResNet50": (25.56e6, 4.14e9),
            "ResNet101": (44.55e6, 7.88e9), "ResNet152": (60.19e6, 11.62e9), "BERT-SWAG": (109.5e6, 0.19e9),
            "BERT-SQuAD": (109.5e6, 2.87e9)}


def _points(catalog, experiment, system):
    return expand(catalog.experiment(experiment), catalog.system(system) if system else None,
                  catalog.workloads, catalog.images)


def _by_label(points):
    return {point.label(): point for point in points}


# ------------------------------------------------------------------------------------------- loading
def test_all_seed_experiments_load_plus_table_ii(catalog):
    assert set(catalog.experiments) == SEED_EXPERIMENTS | {"E001_table2_model_facts"} | DLRUN_OWN | LLM_EXPERIMENTS
    assert len(SEED_EXPERIMENTS) == 26


def test_every_reference_has_a_quote_and_a_source(catalog):
    for experiment in catalog.experiments.values():
        if experiment.id in DLRUN_OWN:
            assert experiment.document.name == "dlrun" and not experiment.references
            continue
        assert experiment.document.name in DOCUMENTS, experiment.id
        for ref in experiment.references:
            for quote in [ref.source, *ref.also]:
                assert quote.doc == experiment.document.name, (experiment.id, ref.id)
                assert quote.where.strip() and quote.quote.strip(), (experiment.id, ref.id)


def test_quantitative_references_say_how_close_and_why(catalog):
    for experiment in catalog.experiments.values():
        for ref in experiment.references:
            if ref.kind == "qualitative":
                assert ref.value is None and ref.tolerance is None
            elif ref.check == "informational":
                assert ref.ambiguous or ref.note, (experiment.id, ref.id)
            else:
                assert ref.unit and ref.tolerance and len(ref.tolerance.why) >= 10, (experiment.id, ref.id)


def test_every_experiment_but_the_unreproducible_names_its_systems(catalog):
    for experiment in catalog.experiments.values():
        systems = set(experiment.systems)
        assert systems <= set(catalog.systems)
        if experiment.status.kind != "not-reproducible" and experiment.measure != "model-facts":
            assert systems, experiment.id


def test_reference_counts_per_experiment(catalog):
    counts = {e.id: e.reference_counts() for e in catalog.experiments.values()}
    assert counts["E001_table2_model_facts"] == (14, 0)
    assert counts["E001_high_throughput_models_fp32"] == (18, 6)  # Table III upper block: 12 cells + 4 averages
    assert counts["E001_large_models_fp32"] == (25, 5)  # lower block 16 + 4 averages + 4 overall + 61.46 %
    assert counts["EG_uc63_resnet50_pytorch_horovod_1080ti"] == (9, 1)  # Table 9: 5 throughputs, 4 speedups
    assert counts["E000_pytorch_fabric"] == (0, 2)


# ------------------------------------------------------------------------------------------- Table II
def test_table_ii_references_equal_the_published_numbers(catalog):
    experiment = catalog.experiment("E001_table2_model_facts")
    published = {}
    for ref in experiment.references:
        published.setdefault(ref.conditions["model"], {})[ref.metric] = (ref.value, ref.unit)
    assert published == {model: {"params": (params, "parameters"), "forward_macs": (ops, "multiply-adds")}
                         for model, (params, ops) in TABLE_II.items()}


def test_table_ii_cnn_rows_are_within_tolerance_of_the_harness_models(catalog):
    """The harness's own models (what `dlrun workloads show NAME --json` counts) against Table II."""
    from dlrun.harness import describe_model

    experiment = catalog.experiment("E001_table2_model_facts")
    judged = 0
    for point in _points(catalog, "E001_table2_model_facts", None):
        if point.skip:
            continue
        facts = describe_model(catalog.workload(point.workload).model)
        for ref in (r for r in experiment.references if r.id in point.references and r.check == "value"):
            assert ref.tolerance.allows(ref.value, facts[ref.metric]), (ref.id, facts)
            judged += 1
    assert judged == 12  # params and ops of the five CNNs, params of both BERT tasks (their ops are informational)
    v1 = describe_model(catalog.workload("resnet50_v1").model)["forward_macs"]
    resnet50_ops = next(r for r in experiment.references if r.id == "resnet50_ops")
    assert not resnet50_ops.tolerance.allows(resnet50_ops.value, v1)  # Table II is v1.5, and 1.5 % tells them apart


def test_table_ii_bert_ops_are_compared_not_judged(catalog):
    refs = {r.id: r for r in catalog.experiment("E001_table2_model_facts").references}
    assert refs["bert_squad_ops"].check == refs["bert_swag_ops"].check == "informational"
    assert refs["bert_squad_params"].tolerance.absolute == 5.0e4


# ------------------------------------------------------------------------------------------- expansion
def test_nccl_on_rtx_runs_allreduce_and_broadcast(catalog):
    points = _points(catalog, "E001_nccl_bus_bandwidth", "rtx-ts4")
    assert [p.label() for p in points] == [f"collective={c} gpus={g}" for c in ("all-reduce", "broadcast")
                                          for g in (2, 4, 8)]  # 16 GPUs excluded: one 8-GPU server
    assert all(p.skip is None for p in points)
    assert [(p.workload, p.nodes, p.ranks_per_node, p.gpus, p.steps) for p in points] == [
        (w, 1, g, g, 500) for w in ("allreduce_1mb_1gb", "broadcast_1mb_1gb") for g in (2, 4, 8)]
    assert points[0].references == ("rtx_pcie_throttled",)


def test_nccl_on_two_aws_instances_uses_fifty_iterations(catalog):
    points = _by_label(_points(catalog, "E001_nccl_bus_bandwidth", "aws-p3dn"))
    sixteen = points["collective=all-reduce gpus=16"]
    assert (sixteen.nodes, sixteen.ranks_per_node, sixteen.steps, sixteen.skip) == (2, 8, 50, None)
    assert sixteen.references == ("aws_16gpu_single_flow", "dgx2_best_at_16")
    assert points["collective=all-reduce gpus=8"].steps == 500


def test_txgaia_fabric_matrix(catalog):
    points = _points(catalog, "E000_fabric_dl_throughput", "txgaia")
    assert len(points) == 3 * 2 * 9 and all(p.skip is None for p in points)
    last = points[-1]
    assert (last.label(), last.workload, last.image, last.nodes, last.ranks_per_node, last.fabric) == (
        "model=InceptionV3 fabric=100Gb Omnipath gpus=512 precision=not stated", "inception3", "tf1.14-nccl", 256, 2,
        "opa")
    assert (last.batch_per_device, last.steps, last.warmup_steps, last.repeats) == (64, 100, 10, 3)
    one_node = _by_label(points)["model=VGG16 fabric=25GigE gpus=2 precision=not stated"]
    assert one_node.references == ("ethernet_average_reduction", "conclusion_no_adverse_effect")
    assert one_node.plan_options() == {
        "image": "tf1.14-nccl", "system": "txgaia", "nodes": 1, "ranks_per_node": 2, "batch_size": 64, "steps": 100,
        "warmup_steps": 10, "precision": "fp32", "fabric": "roce", "data_workers": None, "data": None,
        "variable_update": None, "all_reduce_spec": None, "ps": None, "dist": None,
        "dataparallel_gpus": None, "partition": None}  # every option an axis may set (None: the plan's default)


def test_points_a_system_cannot_run_say_why(catalog):
    h100 = {p.skip for p in _points(catalog, "E000_fabric_dl_throughput", "dgx-h100")}
    assert h100 == {"system 'dgx-h100' has no roce fabric (it has: ib, tcp)",
                                  "system 'dgx-h100' has no opa fabric (it has: ib, tcp)",
                                  "needs 512 GPUs; system 'dgx-h100' has 256 (32 node(s) x 8)"}
    dgx1v = _by_label(_points(catalog, "E001_high_throughput_models_fp32", "dgx1v"))
    assert dgx1v["model=AlexNet gpus=16 precision=FP32 data_workers=4"].skip == \
        "needs 16 GPUs; system 'dgx1v' has 8 (1 node(s) x 8)"
    assert dgx1v["model=AlexNet gpus=8 precision=FP32 data_workers=4"].skip is None
    assert {p.skip for p in _points(catalog, "E001_high_throughput_models_fp32", "zenith")} == {
        "system 'zenith' has no GPUs"}


def test_half_precision_is_skipped_where_the_gpu_has_no_fast_units(catalog):
    points = _points(catalog, "E001_mixed_precision_resnet50", "prace-1080ti")
    assert {p.skip for p in points if p.precision == "amp"} == {
        "NVIDIA GeForce GTX 1080 Ti has no fast half-precision units (its nominal peaks: fp32)"}
    assert all(p.skip is None for p in points if p.precision == "fp32")
    assert all(p.skip is None for p in _points(catalog, "E001_mixed_precision_resnet50", "dgx2"))


def test_ren_batch_sizes_follow_the_system_and_model(catalog):
    batches = {(s, p.workload): p.batch_per_device for s in ("dgx2", "rtx-ts4")
               for p in _points(catalog, "E001_large_models_fp32", s)}
    assert batches == {("dgx2", "resnet101"): 128, ("dgx2", "resnet152"): 128, ("dgx2", "bert_swag"): 64,
                       ("dgx2", "bert_squad"): 32, ("rtx-ts4", "resnet101"): 64, ("rtx-ts4", "resnet152"): 64,
                       ("rtx-ts4", "bert_swag"): 16, ("rtx-ts4", "bert_squad"): 8}
    rtx = _points(catalog, "E001_high_throughput_models_fp32", "rtx-ts4")
    assert len(rtx) == 12 and {p.batch_per_device for p in rtx} == {64} and {p.data_workers for p in rtx} == {4}


def test_han_batch_per_node_over_four_gpus(catalog):
    points = _points(catalog, "E002_batch_size_single_node", "summitdev")
    per_model = {}
    for point in points:
        per_model.setdefault(point.workload, []).append((point.values["batch_per_node"].dlrun, point.batch_per_device))
    assert per_model["lenet"] == [(b, b // 4) for b in (128, 256, 512, 1024, 2048, 4096, 8192)]
    assert per_model["resnet50_v1"] == per_model["resnet101_v1"] == [(128, 32), (256, 64), (512, 128)]
    assert {(p.image, p.nodes, p.ranks_per_node, p.skip) for p in points} == {("tf1.8-cuda9", 1, 4, None)}
    reads_gain = {p.values["batch_per_node"].dlrun for p in points if "gain_128_to_256" in p.references}
    assert reads_gain == {128, 256}  # its own points and the baseline


def test_status_skips_every_point_of_an_experiment_dlrun_cannot_do(catalog):
    points = _points(catalog, "E002_data_format", "summitdev")  # needs data-format:lmdb, which dlrun lacks
    assert points and {p.skip.split(":")[0] for p in points} == {"needs-feature"}
    assert {p.skip.split(":")[0] for p in _points(catalog, "E000_pcie_affinity", "txgaia")} == {"not-reproducible"}


def test_model_facts_run_on_no_system(catalog):
    points = _points(catalog, "E001_table2_model_facts", None)
    assert [(p.workload, p.nodes, p.skip is None) for p in points] == [
        ("alexnet", None, True), ("resnet18", None, True), ("resnet50", None, True), ("resnet101", None, True),
        ("resnet152", None, True), ("bert_swag", None, True), ("bert_squad", None, True)]
    with pytest.raises(ValueError, match="runs on a system"):
        expand(catalog.experiment("E001_nccl_bus_bandwidth"), None, catalog.workloads, catalog.images)


def test_status_turns_runnable_once_the_workloads_exist(catalog):
    # as the catalog said before BERT existed (the built-in text now says runnable: tests/test_capabilities.py)
    experiment = catalog.experiment("E001_large_models_fp32").model_copy(update={"status": Status(
        kind="needs-workload", workloads=["bert_swag", "bert_squad"], reason="BERT fine-tuning is being added")})
    assert effective_status(experiment, catalog.workloads).kind == "runnable"
    fewer = {name: w for name, w in catalog.workloads.items() if name != "bert_squad"}
    assert effective_status(experiment, fewer).workloads == ["bert_squad"]
    del fewer["bert_swag"]
    assert effective_status(experiment, fewer).workloads == ["bert_swag", "bert_squad"]


def test_every_runnable_point_resolves_into_a_rendered_job(catalog):
    """What `dlrun reproduce EXPERIMENT --dry-run` renders: every point not skipped is a valid dlrun run."""
    rendered = 0
    for experiment in catalog.experiments.values():
        for system in experiment.systems:
            for point in _points(catalog, experiment.id, system):
                if point.skip is None:
                    job = render_job(resolve_plan(catalog, point.workload, **point.plan_options()))
                    assert job.script or job.argv
                    rendered += 1
    # 221 before BERT, Ren et al.'s 38 BERT points, dlrun's own smoke experiment, Ren et al.'s 18 broadcast points,
    # Samsi et al.'s three all-reduce strategies (4 models x 2 fabrics x 3 x 9 GPU counts) and Han et al.'s
    # parameter-server runs (3 x 5, 3 x 6), Han et al.'s dd read (NVMe, Lustre) and their models over both (4 x 2),
    # the DGX Cloud recipe's Llama 3.1 8B on 8 to 128 H100, and Ren et al.'s DataParallel against DDP (dgx2 10,
    # aws-p3dn 8, ac922 6, rtx-ts4 8)
    assert rendered == 259 + 2 + 18 + 216 + 15 + 18 + 2 + 8 + 5 + 32


# ------------------------------------------------------------------------------------------- list / show
def test_list_rows_and_show_data(catalog):
    rows = experiment_rows(catalog)
    assert [row["id"] for row in rows] == sorted(SEED_EXPERIMENTS | {"E001_table2_model_facts"} | DLRUN_OWN
                                                 | LLM_EXPERIMENTS)
    table = list_table(rows)
    assert all(len(cells) == len(LIST_COLUMNS) for cells in table)
    nccl = next(cells for cells in table if cells[0] == "E001_nccl_bus_bandwidth")
    # declared needs-workload broadcast_1mb_1gb; runnable now that the workload exists
    assert nccl[4:7] == ["dgx2, aws-p3dn, dgx1v, ac922, rtx-ts4", "runnable", "6/5"]
    data = json.loads(json.dumps(experiment_data(catalog, "E001_nccl_bus_bandwidth")))
    assert set(data["points"]) == {"dgx2", "aws-p3dn", "dgx1v", "ac922", "rtx-ts4"}
    assert data["status_now"]["kind"] == "runnable" and len(data["points"]["dgx1v"]) == 6
    shown = dict(show_rows(catalog, "E001_mixed_precision_resnet50"))
    assert shown["axis precision"] == "FP16 -> amp, FP32 -> fp32"
    assert shown["points on dgx2"] == "15 (15 runnable, 0 skipped)"


# ------------------------------------------------------------------------------------------- bad files
GOOD = """\
id: E9_mine
title: mine
document: {name: "Ren et al. (BNL)", title: t, authors: a}
where: "Table 9"
description: d
measure: training
systems: [dgx2]
axes:
  - name: model
    values: [resnet50]
  - name: gpus
    values: [1, 2]
status: {kind: runnable}
references:
  - id: r
    kind: quantitative
    metric: throughput
    conditions: {gpus: 2}
    value: 1.9
    unit: x
    derive: {op: speedup, baseline: {gpus: 1}}
    tolerance: {relative: 0.1, why: "ten percent, for the test"}
    source: {where: "Sec. 9", quote: "a quote of ten characters"}
"""


def _site(tmp_path, text: str) -> Path:
    path = tmp_path / "site" / "experiments" / "mine.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _load_site(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("DLRUN_PATH", str(tmp_path / "site"))
    return load_catalog().experiments


def test_a_site_adds_its_own_experiment(tmp_path, monkeypatch):
    _site(tmp_path, GOOD)
    experiments = _load_site(tmp_path, monkeypatch)
    mine = experiments["E9_mine"]
    assert mine.references[0].source.doc == "Ren et al. (BNL)"  # the experiment's document by default
    assert "E001_nccl_bus_bandwidth" in experiments


def test_image_architecture_and_benchmark_models_decide_skips(tmp_path, monkeypatch):
    text = GOOD.replace("systems: [dgx2]", "systems: [ac922, txgaia]\nimage: tf1.14-nccl").replace(
        "values: [resnet50]", "values: [resnet50, resnet101]")
    _site(tmp_path, text)
    experiment = _load_site(tmp_path, monkeypatch)["E9_mine"]
    catalog = load_catalog()
    skips = {(system, p.workload, p.gpus): p.skip for system in ("ac922", "txgaia")
             for p in expand(experiment, catalog.system(system), catalog.workloads, catalog.images)}
    assert skips[("ac922", "resnet50", 2)] == "image 'tf1.14-nccl' is built for x86_64, not ppc64le (system 'ac922')"
    assert skips[("txgaia", "resnet101", 1)] == \
        "image 'tf1.14-nccl' runs tf_cnn_benchmarks, which has no model for workload 'resnet101'"
    assert skips[("txgaia", "resnet50", 2)] is None


@pytest.mark.parametrize("old, new, line, message", [
    ("systems: [dgx2]", "systems: [dgx3]", 7, "systems.0: unknown system 'dgx3'; did you mean 'dgx2'?"),
    ("values: [resnet50]", "values: [resnet05]", 10,
     "axes.0.values.0.dlrun: unknown workload 'resnet05'; did you mean 'resnet50'?; if it is still to be written, "
     "list it in status.workloads (needs-workload)"),
    ("conditions: {gpus: 2}", "conditions: {gpus: 3}", 18,
     "references.0.conditions.gpus: 3 is not a value of axis gpus; valid: 1, 2"),
    ("baseline: {gpus: 1}", "baseline: {nodes: 1}", 21,
     "references.0.derive.baseline.nodes: 'nodes' is not an axis of this experiment; valid: gpus, model, system"),
    ("kind: quantitative", "kind: quantitive", 16,
     "references.0.kind: Input should be 'quantitative' or 'qualitative'"),
    ("    tolerance: {relative: 0.1, why: \"ten percent, for the test\"}\n", "", 15,
     "references.0: Value error, a quantitative reference needs a tolerance, with why"),
])
def test_bad_experiment_is_one_line_with_path_and_line(tmp_path, monkeypatch, old, new, line, message):
    assert old in GOOD
    path = _site(tmp_path, GOOD.replace(old, new))
    with pytest.raises(CatalogError) as err:
        _load_site(tmp_path, monkeypatch)
    assert str(err.value) == f"{path}:{line}: {message}"


def test_schema_rules(tmp_path):
    path = tmp_path / "e.yaml"
    path.write_text(GOOD.replace("values: [1, 2]", "values: [{paper: 1, dlrun: 1, missing: why}]"))
    with pytest.raises(CatalogError, match=r"e\.yaml:12: axes\.1\.values\.0: Value error, give exactly one of dlrun"):
        load_file(ExperimentSpec, path)
    path.write_text(GOOD.replace("status: {kind: runnable}", "status: {kind: needs-feature}"))
    with pytest.raises(CatalogError, match=r"e\.yaml:13: status: Value error, status needs-feature needs a reason"):
        load_file(ExperimentSpec, path)


def test_tolerance_bounds():
    assert Tolerance(relative=0.015, why="one and a half percent").allows(4.14e9, 4.089e9)
    assert not Tolerance(relative=0.015, why="one and a half percent").allows(4.14e9, 3.93e9)
    assert Tolerance(absolute=5e3, why="rounding to 0.01 M").allows(61.10e6, 61_100_840)
    with pytest.raises(ValueError, match="exactly one of relative or absolute"):
        Tolerance(relative=0.1, absolute=1, why="both given here")


# ------------------------------------------------------------------------------------------- systems
@pytest.mark.parametrize("system, fp32, amp", [
    ("dgx2", 15.7, 125), ("txgaia", 14.0, 112), ("rtx-ts4", 13.4, 53.8), ("summitdev", 10.6, 21.2),
    ("prace-1080ti", 11.3, None), ("dgx-h100", 67, 989.5), ("dgx1-p100", 10.6, 21.2)])
def test_gpu_peaks_carry_their_source(catalog, system, fp32, amp):
    gpus = catalog.system(system).gpus
    assert peak_for(gpus.peak, "fp32").tflops == fp32
    assert (peak_for(gpus.peak, "amp").tflops if amp else peak_for(gpus.peak, "amp")) == amp
    assert all(peak.source.doc and peak.source.where for peak in gpus.peak)


def test_fabric_links(catalog):
    assert catalog.system("dgx-h100").fabric_config["ib"].links == 8
    assert catalog.system("zenith").fabric_config["opa"].links == 2
    assert catalog.system("txgaia").fabric_config["roce"].speed_gbps == 25


@pytest.mark.parametrize("system, nodes", [("dgx1-p100", "1"), ("prace-skx8160", "2"), ("zenith", "2")])
def test_guide_systems_render(dlrun_home, system, nodes):
    proc = run_cli("run", "resnet50", "--system", system, "--nodes", nodes, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    spec = load_catalog().system(system)
    assert any("PRACE Best Practice Guide" in source.doc and source.about for source in spec.sources)


def test_metrics_dlrun_measures():
    assert MEASURED_METRICS == {"throughput", "busbw", "params", "forward_macs", "read_bandwidth", "file_read_rate"}


def test_experiments_list_is_readable_in_a_terminal_of_80_or_100_columns(tmp_path):
    """Below 160 columns each experiment is its whole id beside its status, its whole title and its source;
    no line is wider than the terminal (COLUMNS, as a terminal sets it), and a pipe still gets the wide table."""
    import json

    from conftest import run_cli

    env = {"DLRUN_HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    rows = json.loads(run_cli("experiments", "list", "--json", env=env, check=True).stdout)
    for width in (80, 100):
        out = run_cli("experiments", "list", env={**env, "COLUMNS": str(width)}, check=True).stdout
        assert max(len(line) for line in out.splitlines()) <= width
        cells = [[cell.strip() for cell in line.split("│")[1:-1]] for line in out.splitlines() if line.startswith("│")]
        ids = [cell[0] for cell in cells if cell[0]]
        assert ids == [row["id"] for row in rows]  # each id whole, on one line
        text = " ".join(" ".join(cell[1:]) for cell in cells)
        for row in rows:
            assert " ".join(row["title"].split()) in text and f"{row['status']}; references" in text
    wide = run_cli("experiments", "list", env=env, check=True).stdout
    assert "┃ document " in wide and "┃ measure " in wide  # the eight columns
