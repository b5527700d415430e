"""The comparability key: from real runs and from real published logs (tests/data/logs/SOURCES.md), and the
differences it lists in words. Unknown never compares equal."""
from __future__ import annotations


import pytest
import torch
from conftest import REPO, run_cli

from dlrun.results import key as keys
from dlrun.results.import_log import import_log
from dlrun.results.store import Store

LOGS = REPO / "tests" / "data" / "logs"


def _imported(name: str, system: str = "dgx1v") -> dict:
    (run, rows), *_ = import_log(LOGS / name, system=system)
    return keys.key_from_run(run, rows)


@pytest.mark.integration
def test_a_real_run_has_a_complete_key(dlrun_home):
    proc = run_cli("run", "trivial", "--steps", "2", "--warmup-steps", "1", "--batch-size", "4")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    store = Store(dlrun_home / "results.sqlite")
    run = store.get_run(store.list_runs(1)[0]["id"])
    key = run["key"]
    assert key == {"workload": "trivial", "model": "trivial", "precision": "fp32", "batch_per_device": 4,
                   "global_batch": 4, "data": "synthetic", "data_format": "n/a", "framework": "pytorch",
                   "framework_version": torch.__version__,
                   "image_digest": "host:harness-" + run["provenance"]["harness_sha256"].split(":")[-1][:16],
                   "devices": 1, "nodes": 1, "system": "localhost", "fabric": "n/a"}
    assert run["key_hash"] == keys.key_hash(key) and keys.has_unknown(key) == []
    assert run["origin"] == "local" and run["site"]


def test_an_imported_tf_cnn_benchmarks_log_says_what_it_cannot_tell():
    key = _imported("tf_cnn_benchmarks/tensorflow23032_1gpu_nightly.log")
    assert key["workload"] == "tf_cnn_benchmarks" and key["framework"] == "tensorflow"
    assert key["system"] == "dgx1v"
    assert keys.has_unknown(key) == ["model", "precision", "batch_per_device", "global_batch", "data",
                                     "data_format", "framework_version", "image_digest", "devices", "nodes",
                                     "fabric"]


def test_an_imported_nccl_tests_log_is_a_communication_key():
    key = _imported("nccl-tests/aws_efa_eks_tagged_2node.log", system="aws-p3dn")
    assert key == {"workload": "nccl-tests:all_reduce", "model": "all_reduce", "precision": "float32",
                   "batch_per_device": "n/a", "global_batch": "n/a", "data": "n/a", "data_format": "n/a",
                   "framework": "nccl-tests", "framework_version": "2.8.3+cuda11.2", "image_digest": "unknown",
                   "devices": 16, "nodes": 2, "system": "aws-p3dn", "fabric": "unknown"}
    one_host = _imported("nccl-tests/superbench_allreduce_g8.log")
    assert (one_host["devices"], one_host["nodes"], one_host["fabric"]) == (8, 1, "n/a")


def test_two_imported_logs_are_never_silently_equal():
    a = _imported("tf_cnn_benchmarks/tensorflow23032_1gpu_nightly.log")
    b = _imported("tf_cnn_benchmarks/tfbenchmarks_pr63_1gpu_2017.log")
    assert keys.key_hash(a) == keys.key_hash(b)  # the same text of unknowns ...
    found = keys.differences(a, b)              # ... but nothing is known to match
    assert "image digest: unknown on both sides (cannot tell whether they match)" in found
    assert len(found) == len(keys.has_unknown(a))


def test_differences_in_words_and_the_axis_that_may_differ():
    a = {**{name: "x" for name in keys.KEY_FIELDS}, "devices": 1, "precision": "fp32", "system": "dgx2"}
    b = {**a, "devices": 8, "precision": "amp(float16)", "system": "rtx-ts4", "framework_version": "unknown"}
    assert keys.differences(a, b) == ["precision: fp32 vs amp(float16)",
                                      "framework version: x vs unknown (cannot tell whether they match)",
                                      "devices: 1 vs 8", "system: dgx2 vs rtx-ts4"]
    assert keys.differences(a, b, ignore={"system", "devices", "precision", "framework_version"}) == []
    assert keys.differences(a, dict(a)) == []


def test_spread_over_many_runs_counts_each_value():
    fp32 = {**{name: "x" for name in keys.KEY_FIELDS}, "precision": "fp32"}
    amp = {**fp32, "precision": "amp(bfloat16)", "image_digest": "unknown"}
    assert keys.spread([(fp32, 3), (amp, 2)]) == [
        "precision: amp(bfloat16) (2 runs), fp32 (3 runs)",
        "image digest: x (3 runs), unknown (2 runs) (cannot tell whether they match)"]
    assert keys.spread([(amp, 1)]) == []  # a single run matches nothing, so nothing is in doubt
    assert keys.spread([(amp, 2)]) == ["image digest: unknown for 2 runs (cannot tell whether they match)"]


def test_the_hash_is_stable_across_versions_and_field_order():
    key = {name: "x" for name in keys.KEY_FIELDS}
    assert keys.key_hash(key) == keys.key_hash(dict(reversed(list(key.items()))))
    # pinned: a key hashed at one site must hash the same at another, with any later dlrun
    assert keys.key_json({"b": 1, "a": "x"}) == '{"a":"x","b":1}'
    assert keys.key_hash({"b": 1, "a": "x"}) == "cdab067e9f3beb32"


def test_a_matmul_measurement_has_a_key_of_its_own():
    from dlrun.measure import matmul_record

    row = {"metric": "matmul", "value": 393.0, "unit": "GFLOP/s", "dtype": "bfloat16", "size": 64, "repeats": 1,
           "threads": 2, "device": "cpu", "framework": "pytorch", "framework_version": "2.13.0"}
    run, rows = matmul_record("localhost", "amp", row, now=0)
    key = keys.key_from_run(run, rows)
    assert (key["workload"], key["model"], key["precision"], key["batch_per_device"]) == \
        ("matmul", "n/a", "amp(bfloat16)", "n/a")


# ------------------------------------------------------------------ imported logs told what they are
DIGEST = "sha256:" + "5e" * 32  # the site's lock entry for the image (as `dlrun images build` records it)
KUBEFLOW = LOGS / "tf_cnn_benchmarks/mpioperator_horovod_2gpu_tf1.14.log"


def _locked_catalog(image: str = "tf1.14-nccl"):
    from dlrun.cli.options import load_catalog
    from dlrun.images import lock

    lock.record(image, "x86_64", digest=DIGEST)
    return load_catalog()


def test_an_imported_tf_cnn_benchmarks_log_gets_the_key_of_the_dlrun_run_of_the_same_thing(dlrun_home):
    # The dlrun run: `dlrun run resnet101_v1 --system txgaia --image tf1.14-nccl --nodes 1 --ranks-per-node 2
    # --batch-size 64` renders tf_cnn_benchmarks with Horovod in NCHW, and had its job printed this log, the
    # executor would store run_row(plan.summary()) with the log's parsed result. The import, told the workload,
    # image and precision, must be stored with the same key, field by field.
    from pathlib import Path

    from dlrun.execute.record import run_row
    from dlrun.images.verify import with_local_image
    from dlrun.plan import resolve_plan
    from dlrun.results.import_log import import_log_as_runs
    from dlrun.results.import_plan import ImportOptions
    from dlrun.results.parsers import parse_text
    from dlrun.results.schema import RUN_COLUMNS

    catalog = _locked_catalog()
    plan = resolve_plan(catalog, "resnet101_v1", image="tf1.14-nccl", system="txgaia", nodes=1, ranks_per_node=2,
                        batch_size=64, local_image=with_local_image)
    dlrun_run = run_row(plan.summary(), run_id="20260101-000000-000000", run_dir=Path("/nonexistent"), status="ok",
                        started=0, finished=1, provenance={})
    dlrun_key = keys.key_from_run(dlrun_run, [parse_text(KUBEFLOW.read_text()).to_dict()])
    [(run, rows, imported_plan)] = import_log_as_runs(
        KUBEFLOW, catalog=catalog, system="txgaia", local_image=with_local_image,
        options=ImportOptions(workload="resnet101_v1", image="tf1.14-nccl", precision="fp32", nodes=1))
    imported_key = keys.key_from_run({**run, "origin": "import-log"}, rows)
    for name in keys.KEY_FIELDS:
        assert imported_key[name] == dlrun_key[name], name
    assert keys.has_unknown(imported_key) == [] and keys.differences(imported_key, dlrun_key) == []
    assert imported_key["framework"] == "tensorflow/horovod layout=NCHW" and imported_key["image_digest"] == DIGEST
    # stored in the same shape: the columns and the plan record a dlrun run of the plan gets
    same = [c for c in RUN_COLUMNS if c not in ("id", "created_at", "finished_at", "site", "origin", "run_dir",
                                                "experiment", "point")]
    assert {c: run.get(c) for c in same} == {c: dlrun_run.get(c) for c in same}
    assert run["plan"] == dlrun_run["plan"] == imported_plan.summary()
    assert run["origin"] == run["provenance"]["origin"] == "import-log"
    assert run["provenance"]["plan_from"]["batch_size"] == "log"
    assert run["provenance"]["plan_from"]["precision"] == "option"


def test_an_imported_dllogger_log_is_keyed_as_the_code_that_ran_it(dlrun_home):
    # A DeepLearningExamples log, told its workload and image, has every key field known. It differs from
    # the key dlrun's harness gets on the same plan in what the log says ran differently: ImageNet JPEGs
    # (through DALI) where the plan, without --data, trains on synthetic data, and the framework, which
    # names the code that ran, so the two are never pooled as like-for-like ("the same A100 ... 1.56x
    # slower in one vendor's harness than in another's").
    from dlrun.images.verify import with_local_image
    from dlrun.reproduce.resume import planned_key
    from dlrun.results.import_log import import_log_as_runs
    from dlrun.results.import_plan import ImportOptions

    catalog = _locked_catalog("pytorch1.0-nvcr18.11")
    [(run, rows, plan)] = import_log_as_runs(
        LOGS / "dllogger/perfreport_pytorch_rn50_8gpu_amp_stdout.log", catalog=catalog, system="dgx1v",
        local_image=with_local_image,
        options=ImportOptions(workload="resnet50", image="pytorch1.0-nvcr18.11", nodes=1))
    key = keys.key_from_run({**run, "origin": "import-log"}, rows)
    assert keys.has_unknown(key) == []
    assert (key["precision"], key["batch_per_device"], key["global_batch"], key["devices"], key["nodes"]) == \
        ("amp", 128, 1024, 8, 1)
    assert (key["data"], key["data_format"], key["framework"]) == ("real:imagenet", "jpeg",
                                                                    "pytorch/deeplearningexamples")
    planned = planned_key(plan)  # the harness's run of the same plan, as far as the plan decides it
    assert [name for name in keys.KEY_FIELDS if planned[name] not in (keys.UNKNOWN, key[name])
            and name != "precision"] == ["data", "data_format", "framework"]


def test_an_imported_log_without_options_takes_the_input_its_log_names():
    assert _imported("tf_cnn_benchmarks/mpioperator_horovod_2gpu_tf1.14.log")["data"] == "synthetic"
    assert _imported("dllogger/dllogger_example_resnet_json.log")["data"] == "real:imagenet"
    assert _imported("tf_cnn_benchmarks/tensorflow23032_1gpu_nightly.log")["data"] == "unknown"  # no header


def test_an_imported_nccl_tests_log_gets_the_key_of_the_dlrun_run_of_the_same_thing(dlrun_home):
    # 16 H100 over 2 hosts (the log lists them), as `dlrun run nccl_all_reduce_perf --system dgx-h100 --nodes 2
    # --image pytorch2.6-ngc24.12 --fabric ib` would run the image's own all_reduce_perf
    from pathlib import Path

    from dlrun.execute.record import run_row
    from dlrun.images.verify import with_local_image
    from dlrun.plan import resolve_plan
    from dlrun.results.import_log import import_log_as_runs
    from dlrun.results.import_plan import ImportOptions
    from dlrun.results.parsers import parse_text

    catalog = _locked_catalog("pytorch2.6-ngc24.12")
    log = LOGS / "nccl-tests/a3mega_allreduce_2node.log"
    plan = resolve_plan(catalog, "nccl_all_reduce_perf", image="pytorch2.6-ngc24.12", system="dgx-h100", nodes=2,
                        fabric="ib", local_image=with_local_image)
    dlrun_run = run_row(plan.summary(), run_id="20260101-000000-000001", run_dir=Path("/nonexistent"), status="ok",
                        started=0, finished=1, provenance={})
    dlrun_key = keys.key_from_run(dlrun_run, [parse_text(log.read_text()).to_dict()])
    [(run, rows, _)] = import_log_as_runs(log, catalog=catalog, system="dgx-h100", local_image=with_local_image,
                                          options=ImportOptions(workload="nccl_all_reduce_perf",
                                                                image="pytorch2.6-ngc24.12", fabric="ib"))
    imported_key = keys.key_from_run({**run, "origin": "import-log"}, rows)
    assert imported_key == dlrun_key
    assert keys.has_unknown(imported_key) == ["framework_version"]  # this log prints no NCCL version line
    assert (imported_key["devices"], imported_key["nodes"], imported_key["fabric"]) == (16, 2, "ib")
