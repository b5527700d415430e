"""The catalog's experiments say what dlrun can do only through capabilities read from the code
(`dlrun.catalog.capabilities`): a status or deviation that the code contradicts fails here, so it cannot go stale."""
from __future__ import annotations

import dataclasses

import pytest
from conftest import run_cli

from dlrun.catalog.capabilities import disagreements, has
from dlrun.catalog.experiment_vocabulary import CAPABILITIES, CAPABILITY_FAMILIES, MEASURED_METRICS
from dlrun.catalog.experiment_points import effective_status
from dlrun.catalog.experiments import Deviation, Status
from dlrun.reproduce import prepare
from dlrun.results.store import Store


def test_the_catalog_agrees_with_what_the_code_can_do(catalog):
    assert disagreements(catalog) == []


def test_capabilities_are_read_from_the_code_that_provides_them(catalog):
    from dlrun.datasets import FORMATS
    from dlrun.harness import load_harness

    collectives = set(load_harness("pytorch", "collectives").COLLECTIVES)
    assert collectives >= {"allreduce", "broadcast", "allgather"}
    assert all(has(f"collective:{name}", catalog) for name in collectives) and not has("collective:p2p", catalog)
    from dlrun.runoptions import BY_NAME

    harness = set(load_harness("pytorch", "horovod").DIST_CHOICES)
    dists = harness & set(BY_NAME["dist"].choices)  # what dlrun run takes and the harness runs
    assert dists and all(has(f"dist:{name}", catalog) for name in dists)
    assert not any(has(f"dist:{name}", catalog) for name in harness - dists)
    assert not has("dist:no-such-thing", catalog)
    assert all(has(f"data-format:{name}", catalog) for name in FORMATS)  # dlrun writes what its harness reads
    assert not has("data-format:lmdb", catalog) and has("real-data", catalog)
    assert all(has(f"metric:{name}", catalog) for name in MEASURED_METRICS | {"matmul"})
    assert not has("metric:ipc", catalog) and has("system-storage", catalog)  # SystemSpec.storage
    assert has("workload:bert_squad", catalog) and not has("workload:cartdg", catalog)
    for name in CAPABILITIES:
        has(name, catalog)  # every fixed name has a probe
    for family in CAPABILITY_FAMILIES:
        has(f"{family}:no-such-thing", catalog)  # and every family
    with pytest.raises(KeyError):
        has("rdma:ib", catalog)


def _with(catalog, experiment: str, **changes):
    """The catalog with one experiment changed (a copy; the cached catalog stays as it is)."""
    experiments = dict(catalog.experiments)
    experiments[experiment] = experiments[experiment].model_copy(update=changes)
    return dataclasses.replace(catalog, _experiments=experiments)


def test_a_status_or_deviation_the_code_contradicts_is_named(catalog):
    met = _with(catalog, "E002_dd_read", status=Status(kind="needs-feature", requires=["real-data"],
                                                       reason="needs real data, which dlrun has"))
    assert disagreements(met) == []  # derived: runnable (effective_status), nothing to edit by hand
    assert effective_status(met.experiment("E002_dd_read"), met.workloads).kind == "runnable"
    unnamed = _with(catalog, "E002_dd_read", status=Status(kind="needs-feature", reason="says nothing checkable"))
    assert disagreements(unnamed) == ["E002_dd_read: status needs-feature names no capability it needs "
                                      "(status.requires)"]
    overclaimed = _with(catalog, "E001_nccl_bus_bandwidth", status=Status(kind="runnable", requires=["metric:ipc"]))
    assert disagreements(overclaimed) == ["E001_nccl_bus_bandwidth: status runnable, but dlrun lacks metric:ipc"]
    workloads = _with(catalog, "E001_large_models_fp32", status=Status(
        kind="needs-workload", workloads=["bert_swag"], reason="BERT fine-tuning is being added"))
    assert disagreements(workloads) == ["E001_large_models_fp32: status needs-workload bert_swag, but they exist: "
                                        "make it runnable"]
    spec = catalog.experiment("E002_scale_up_single_node")
    claim = Deviation(setting="training data", dlrun="synthetic", reason="dlrun's workloads are synthetic",
                      lacks=["real-data"])
    deviation = _with(catalog, spec.id, deviations=[*spec.deviations, claim])
    assert disagreements(deviation) == ["E002_scale_up_single_node: deviation 'training data' stands on dlrun "
                                        "lacking real-data, which it has now: rewrite it"]


def test_an_unknown_capability_is_refused_where_it_is_written():
    with pytest.raises(ValueError, match="unknown capability 'perf-counters'; valid: real-data, system-storage, "
                                         "parallelism-axis, or FAMILY:NAME"):
        Status(kind="needs-feature", requires=["perf-counters"], reason="hardware counters")
    with pytest.raises(ValueError, match="unknown capability 'metric:'"):
        Deviation(setting="x", dlrun="y", reason="a reason long enough", lacks=["metric:"])


def _rendered(catalog, experiment: str, tmp_path) -> list[str]:
    store = Store(tmp_path / "results.sqlite")
    _, systems = prepare(catalog, experiment, system=None, dry_run=True, local_image=None, store=store)
    return [work.rendered.script for system in systems for work in system.works if work.rendered is not None]


def test_what_a_deviation_says_dlrun_renders_is_in_the_rendered_jobs(catalog, tmp_path):
    claims = [(spec.id, deviation) for spec in catalog.experiments.values() for deviation in spec.deviations
              if deviation.renders]
    assert [experiment for experiment, _ in claims] == ["E002_dd_read", "E002_scale_up_single_node",
                                                         "EL_dgxc_llama31_8b_bf16"]
    for experiment, deviation in claims:
        scripts = _rendered(catalog, experiment, tmp_path)
        for text in deviation.renders:
            assert any(text in script for script in scripts), f"{experiment}: {deviation.setting}: {text!r}"
    # what the deviation said before: Horovod, which this image does not have
    assert not any("--variable_update=horovod" in script
                   for script in _rendered(catalog, "E002_scale_up_single_node", tmp_path))


def test_experiments_show_says_what_dlrun_has_and_lacks(dlrun_home):
    proc = run_cli("experiments", "show", "E001_cpu_dataloader_sweep")
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert "real-data (dlrun has it)" in text and "metric:ipc (dlrun lacks it:" in text
    storage = " ".join(run_cli("experiments", "show", "E002_storage_and_overall").stdout.split())
    assert "system-storage (dlrun has it)" in storage
    large = run_cli("experiments", "show", "E001_large_models_fp32")
    assert "being added" not in large.stdout and "needs-workload" not in large.stdout


def test_the_dataparallel_experiment_is_runnable_by_derivation(catalog):
    """--dist dataparallel and the parallelism axis both exist: the declared needs-feature status derives to
    runnable (tests/test_dataparallel_points.py shows it turns back without the axis)."""
    assert has("dist:dataparallel", catalog) and has("parallelism-axis", catalog)
    spec = catalog.experiment("E001_dataparallel_vs_ddp")
    assert spec.status.kind == "needs-feature" and effective_status(spec, catalog.workloads).kind == "runnable"
