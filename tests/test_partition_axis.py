"""An experiment's `partition` axis: the same workload on the GPU partition and on the CPU partition of one system.
Each point is planned on its partition's nodes exactly as `dlrun run --partition` plans them, a partition the
system does not model is one line naming the valid ones (exit 2), `experiments show` and `reproduce --dry-run` name
each point's partition, and reproduce keeps the partitions apart as an axis: resume and compare group by it, a
derived reference divides one partition's points by the other's. The system is test_partitions.py's site profile
(its GPU partition's nodes are BIH's published med0304)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_cli
from test_partitions import SITE

from dlrun.catalog import load_catalog
from dlrun.catalog.experiment_points import expand
from dlrun.catalog.experiments import Axis, AxisValue
from dlrun.catalog.loader import CatalogError
from dlrun.errors import UsageError
from dlrun.paths import harness_hashes
from dlrun.plan import resolve_plan
from dlrun.probe.host import probe_host
from dlrun.reproduce import TaggedStore, compare_points, compare_references
from dlrun.reproduce.work import plan_points
from dlrun.results.store import Store

EXPERIMENT = """\
id: partitions_check
title: "one workload on a system's GPU and CPU partitions"
document: {name: "dlrun", title: "dlrun's test suite", authors: "the dlrun project"}
where: "tests/test_partition_axis.py"
description: "ResNet-50 on the GPU partition and on the CPU partition of one system."
measure: training
systems: [bih-like]
axes:
  - name: model
    values: [resnet50]
  - name: partition
    values: [{paper: "GPU nodes", dlrun: gpu}, {paper: "CPU nodes", dlrun: cpu}]
settings:
  - {when: {partition: "CPU nodes"}, batch_per_device: 16, why: "a smaller batch on the CPU nodes"}
status: {kind: runnable}
references:
  - {id: gpu_over_cpu, kind: quantitative, metric: throughput, value: 10, unit: x,
     derive: {op: ratio, numerator: {partition: gpu}, denominator: {partition: "CPU nodes"}},
     tolerance: {relative: 0.2, why: "a fifth, for the test"}, source: {where: "T1", quote: "ten times"}}
"""


def _site(root: Path, monkeypatch, experiment: str = EXPERIMENT) -> dict[str, str]:
    for folder, name, text in (("systems", "bih-like", SITE), ("experiments", "partitions", experiment)):
        (root / "site" / folder).mkdir(parents=True, exist_ok=True)
        (root / "site" / folder / f"{name}.yaml").write_text(text)
    monkeypatch.setenv("DLRUN_PATH", str(root / "site"))
    return {"DLRUN_PATH": str(root / "site")}


@pytest.fixture
def site(tmp_path, monkeypatch, dlrun_home):
    env = _site(tmp_path, monkeypatch)
    catalog = load_catalog(host=probe_host())
    return catalog, catalog.experiment("partitions_check"), env


def _works(catalog, spec, store: Store, where=None):
    return plan_points(catalog, spec, "bih-like", where=where or {}, repeats=None, local_image=None, store=store)


def test_each_point_runs_on_its_partitions_nodes_as_run_partition_plans_them(site, tmp_path):
    catalog, spec, _ = site
    gpu, cpu = expand(spec, catalog.system("bih-like"), catalog.workloads, catalog.images)
    assert (gpu.partition, gpu.nodes, gpu.ranks_per_node, gpu.gpus, gpu.skip) == ("gpu", 1, 4, 4, None)
    # a GPU experiment's point on the CPU partition runs on its CPUs: one rank per node, no GPU
    assert (cpu.partition, cpu.nodes, cpu.ranks_per_node, cpu.gpus, cpu.skip) == ("cpu", 1, 1, 0, None)
    assert cpu.batch_per_device == 16 and cpu.label() == "model=resnet50 partition=CPU nodes"
    assert cpu.plan_options()["partition"] == "cpu" and cpu.as_dict()["partition"] == "cpu"
    works = _works(catalog, spec, Store(tmp_path / "none.sqlite"))
    for work in works:
        options = work.point.plan_options()
        by_cli = resolve_plan(catalog, "resnet50", system="bih-like", partition=work.point.partition,
                              nodes=options["nodes"], ranks_per_node=options["ranks_per_node"],
                              batch_size=options["batch_size"])
        assert work.plan.summary() == by_cli.summary(), work.id
        assert work.key["partition"] == work.point.partition
    gpu_plan, cpu_plan = (work.plan for work in works)
    assert (gpu_plan.device, gpu_plan.system.partition, gpu_plan.scheduler_options.partition) == ("cuda", None, "gpu")
    assert (cpu_plan.device, cpu_plan.system.partition, cpu_plan.system.cpu.cores) == ("cpu", "cpu", 128)
    assert "#SBATCH --partition=cpu" in works[1].rendered.script and "--gpus-per-node" not in works[1].rendered.script
    (only,) = _works(catalog, spec, Store(tmp_path / "none.sqlite"), where={"partition": ["CPU nodes"]})
    assert only.point.partition == "cpu"


def test_a_partition_the_system_does_not_model_is_one_line_naming_the_valid_ones(tmp_path, monkeypatch, dlrun_home):
    env = _site(tmp_path, monkeypatch, EXPERIMENT.replace("dlrun: cpu}", "dlrun: cpux}"))
    with pytest.raises(CatalogError) as refused:
        load_catalog(host=probe_host()).experiments
    assert refused.value.exit_code == 2
    assert str(refused.value).endswith(": axes.1.values.1.dlrun: partition 'cpux' is not a partition of system "
                                       "'bih-like'; did you mean 'cpu'? valid: cpu, gpu")
    proc = run_cli("experiments", "show", "partitions_check", env=env)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "partition 'cpux' is not a partition of system 'bih-like'" in proc.stderr


def test_a_system_the_catalog_check_did_not_hold_it_to_is_refused_the_same_way(catalog):
    """A point expanded for a system the experiment does not list (or one loaded after it) meets the same check."""
    experiment = catalog.experiment("E001_high_throughput_models_fp32")
    partition = Axis(name="partition", values=[AxisValue(paper="GPU nodes", dlrun="gpu")])
    with_axis = experiment.model_copy(update={"axes": [*experiment.axes, partition]})
    with pytest.raises(UsageError, match=r"^experiment E001_high_throughput_models_fp32: axis partition 'GPU nodes': "
                                         r"partition 'gpu' is not a partition of system 'dgx2'; valid: none"):
        expand(with_axis, catalog.system("dgx2"), catalog.workloads, catalog.images)


def test_show_and_dry_run_name_each_points_partition(site):
    _, _, env = site
    shown = run_cli("experiments", "show", "partitions_check", "--json", env=env, check=True)
    points = json.loads(shown.stdout)["points"]["bih-like"]
    assert [(p["axes"]["partition"]["paper"], p["partition"]) for p in points] == [("GPU nodes", "gpu"),
                                                                                    ("CPU nodes", "cpu")]
    dry = run_cli("reproduce", "partitions_check", "--dry-run", env=env, check=True).stdout
    assert "partition=GPU nodes" in dry and "partition=CPU nodes" in dry
    assert "+#SBATCH --partition=cpu" in dry  # the CPU point's script differs from the GPU point's in its partition


def _record(run_id: str, plan) -> dict:
    """A run record as the executor stores it (the columns the comparability key reads, and the plan)."""
    return {"id": run_id, "created_at": f"2026-01-01T00:00:{run_id[-2:]}Z", "status": "ok",
            "workload": plan.workload.name, "model": plan.workload.model, "image": plan.image.name,
            "image_digest": plan.image.digest, "system": plan.system.name, "fabric": plan.fabric,
            "nodes": plan.nodes, "ranks_per_node": plan.ranks_per_node, "world_size": plan.world_size,
            "batch_size": plan.batch_size, "precision": plan.precision, "plan": plan.summary(),
            "provenance": {"harness_sha256": harness_hashes(Path(plan.image.harness_dir), "pytorch")[0]}}


def test_reproduce_keeps_the_partitions_apart_and_divides_one_by_the_other(site, tmp_path):
    catalog, spec, _ = site
    store = Store(tmp_path / "results.sqlite")
    gpu, cpu = _works(catalog, spec, store)
    for work, values in ((gpu, (1000.0, 1010.0, 990.0)), (cpu, (100.0, 101.0, 99.0))):
        for index, value in enumerate(values):
            result = {"metric": "throughput", "value": value, "unit": "images/sec", "model": "resnet50",
                      "extra": {"framework": "pytorch", "framework_version": "2.13.0+cpu"}}
            run_id = f"{work.point.partition}{index:02d}"
            TaggedStore(store.path, spec.id, work.id).add_run(_record(run_id, work.plan), [result])
    # a run of the GPU plan tagged with the CPU point is no repeat of it (the partition is in the key); a run of
    # the CPU plan is
    TaggedStore(store.path, spec.id, cpu.id).add_run(_record("x09", gpu.plan), [])
    TaggedStore(store.path, spec.id, cpu.id).add_run(_record("y09", cpu.plan), [])
    for work in (gpu, cpu):
        work.refresh(store)
    assert [[run.id for run in work.stored] for work in (gpu, cpu)] == [["gpu00", "gpu01", "gpu02"],
                                                                       ["cpu00", "cpu01", "cpu02", "y09"]]
    titles = [comparison.title for comparison in compare_points(store, spec, [gpu, cpu])]
    assert len(titles) == 2 and titles[0].endswith("(partition=GPU nodes)") and titles[1].endswith(
        "(partition=CPU nodes)")
    (row,) = compare_references(spec, [gpu, cpu], "bih-like")
    assert row.verdict == "within" and row.measured == pytest.approx(10.0) and row.runs == 6, row.why
