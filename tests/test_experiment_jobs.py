"""A runnable experiment's rendered jobs can produce every reference it judges: a checkpoint time needs a job
that checkpoints, a bus bandwidth a collective, a read rate a storage job, MFU an LLM job of the harness.

References dlrun cannot produce with any job (GPU utilization, communication share, accuracy) stay "not
measured" by the vocabulary (dlrun.catalog.experiment_vocabulary.MEASURED_METRICS); references kept as
information (`check: informational`, with why) and quotes without directions are not judged at all."""
from __future__ import annotations

from dlrun.catalog.experiment_points import expand
from dlrun.catalog.models import COLLECTIVE_KINDS
from dlrun.plan import resolve_plan
from dlrun.render import render_job


def _checkpoints(plan) -> bool:
    return plan.checkpoint_every is not None and plan.image.harness_framework == "pytorch"


#: metric -> whether a plan's job produces it
PRODUCED_BY = {
    "throughput": lambda plan: plan.workload.trains,
    "busbw": lambda plan: plan.workload.kind in COLLECTIVE_KINDS or plan.workload.kind == "nccl-tests",
    "read_bandwidth": lambda plan: plan.workload.kind == "storage" and plan.workload.storage_test == "sequential",
    "file_read_rate": lambda plan: plan.workload.kind == "storage" and plan.workload.storage_test == "small-files",
    "checkpoint_time": _checkpoints,
    "mfu": lambda plan: plan.workload.kind == "llm-pretraining" and plan.image.harness_framework == "pytorch",
}


def test_a_runnable_experiments_jobs_produce_every_reference_it_judges(catalog):
    checked = 0
    for experiment in catalog.experiments.values():
        if experiment.status.kind != "runnable":
            continue
        judged = {ref.id: ref for ref in experiment.references if ref.metric in PRODUCED_BY
                  and (ref.directions if ref.kind == "qualitative" else ref.check != "informational")}
        served: set[str] = set()
        for system in experiment.systems:
            for point in expand(experiment, catalog.system(system), catalog.workloads, catalog.images):
                if point.skip is not None:
                    continue
                plan = resolve_plan(catalog, point.workload, **point.plan_options())
                assert render_job(plan).script
                for ref_id in point.references:
                    if ref_id in judged:
                        ref = judged[ref_id]
                        assert PRODUCED_BY[ref.metric](plan), (
                            f"{experiment.id}: reference {ref_id} ({ref.metric}) is judged, but the job of point "
                            f"{point.label()} on {system} cannot produce it")
                        served.add(ref_id)
                        checked += 1
        unserved = sorted(set(judged) - served)
        assert not unserved, f"{experiment.id}: no runnable point produces {unserved}"
    assert checked > 500


def test_scale_out_reads_lustre_and_keeps_its_checkpoint_times_as_information(catalog):
    experiment = catalog.experiment("E002_scale_out_workers")
    refs = {ref.id: ref for ref in experiment.references}
    assert {refs[i].check for i in ("checkpoint_lenet_5s", "checkpoint_resnet101_70s")} == {"informational"}
    assert any(d.setting == "checkpoints" for d in experiment.deviations)
    point = next(p for p in expand(experiment, catalog.system("summitdev"), catalog.workloads, catalog.images)
                 if p.skip is None)
    plan = resolve_plan(catalog, point.workload, **point.plan_options())
    assert plan.data is not None and plan.data.path == catalog.system("summitdev").storage["lustre"].path
    assert "--data_dir=/data" in render_job(plan).script
