"""The comparability key: from real runs and from real published logs (tests/data/logs/SOURCES.md), and the
differences it lists in words. Unknown never compares equal."""
from __future__ import annotations


import pytest
import torch
from conftest import REPO, run_cli

from dlrun.harness.harness_contract import code_path
from dlrun.probe.cpu import cpu_inventory, memory_gb
from dlrun.results import key as keys
from dlrun.results.compare import key_diff
from dlrun.results.fingerprint import short_cpu_name
from dlrun.results.exchange.import_log import import_log
from dlrun.results.store import Store

LOGS = REPO / "tests" / "data" / "logs"


def _imported(name: str, system: str = "dgx1v") -> dict:
    (run, rows), *_ = import_log(LOGS / name, system=system)
    return keys.key_from_run(run, rows)


@pytest.mark.slow
def test_a_real_run_has_a_complete_key(dlrun_home):
    proc = run_cli("run", "trivial", "--steps", "2", "--warmup-steps", "1", "--batch-size", "4")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    store = Store(dlrun_home / "results.sqlite")
    run = store.get_run(store.list_runs(1)[0]["id"])
    key = run["key"]
    cpu = cpu_inventory()  # the machine as dlrun's probe sees it; the job read the same /proc and /sys
    machine = {"site": run["site"], "cpu": short_cpu_name(cpu["model"]), "cpu_id": cpu["cpu_id"], "isa": cpu["isa"],
               "cores": f"{cpu['sockets']}x{cpu['physical_cores'] // cpu['sockets']}",
               "memory_gib": round(memory_gb()), "gpu": "none", "gpu_count": 0, "gpu_memory_gib": "n/a",
               "driver": "n/a", "cuda": "n/a", "cudnn": "n/a", "nccl": "n/a", "fabric_rate": "n/a"}
    assert key == {"workload": "trivial", "model": "trivial", "precision": "fp32", "batch_per_device": 4,
                   "global_batch": 4, "data": "synthetic", "data_format": "n/a", "framework": "pytorch",
                   "framework_version": torch.__version__,
                   "image_digest": "host:harness-" + run["provenance"]["harness_sha256"].split(":")[-1][:16],
                   "devices": 1, "nodes": 1, "system": "localhost", "partition": "n/a", "fabric": "n/a", "env": "none",
                   "code_path": code_path(run["results"][0]["extra"]["knobs"]), **machine}
    assert key["code_path"] not in (None, "unknown", "n/a")
    assert run["key_hash"] == keys.key_hash(key) and key_diff.has_unknown(key) == []
    assert run["origin"] == "local" and run["site"]
    assert run["fingerprint"]["node_from"] == "job"  # what the job reported of its node, not dlrun's inventory
    # 2 timed steps: too few to judge (and on a busy machine, contended, which is worse)
    assert "short: 2 timed step(s) (fewer than 5)" in run["quality"]["reasons"]
    assert run["quality"]["verdict"] == run["verdict"] in ("short", "contended")


def test_an_imported_tf_cnn_benchmarks_log_says_what_it_cannot_tell():
    key = _imported("tf_cnn_benchmarks/tensorflow23032_1gpu_nightly.log")
    assert key["workload"] == "tf_cnn_benchmarks" and key["framework"] == "tensorflow"
    assert key["system"] == "dgx1v"
    assert key_diff.has_unknown(key) == ["model", "precision", "batch_per_device", "global_batch", "data",
                                     "data_format", "framework_version", "image_digest", "devices", "nodes",
                                     "fabric", "env", "site", *keys.MACHINE_FIELDS]  # nobody said where it ran


def test_an_imported_nccl_tests_log_is_a_communication_key():
    key = _imported("nccl-tests/aws_efa_eks_tagged_2node.log", system="aws-p3dn")
    assert key == {"workload": "nccl-tests:all_reduce", "model": "all_reduce", "precision": "float32",
                   "batch_per_device": "n/a", "global_batch": "n/a", "data": "n/a", "data_format": "n/a",
                   "framework": "nccl-tests", "framework_version": "2.8.3+cuda11.2", "image_digest": "unknown",
                   "devices": 16, "nodes": 2, "system": "aws-p3dn", "partition": "n/a", "fabric": "unknown", "env": "unknown",
                   "code_path": "n/a", "site": "unknown",
                   **dict.fromkeys(keys.MACHINE_FIELDS, "unknown")}
    one_host = _imported("nccl-tests/superbench_allreduce_g8.log")
    assert (one_host["devices"], one_host["nodes"], one_host["fabric"]) == (8, 1, "n/a")


def test_two_imported_logs_are_never_silently_equal():
    a = _imported("tf_cnn_benchmarks/tensorflow23032_1gpu_nightly.log")
    b = _imported("tf_cnn_benchmarks/tfbenchmarks_pr63_1gpu_2017.log")
    assert keys.key_hash(a) == keys.key_hash(b)  # the same text of unknowns ...
    found = key_diff.differences(a, b)              # ... but nothing is known to match
    assert "image digest: unknown on both sides (cannot tell whether they match)" in found
    assert len(found) == len(key_diff.has_unknown(a))


def test_differences_in_words_and_the_axis_that_may_differ():
    a = {**{name: "x" for name in keys.KEY_FIELDS}, "devices": 1, "precision": "fp32", "system": "dgx2"}
    b = {**a, "devices": 8, "precision": "amp(float16)", "system": "rtx-ts4", "framework_version": "unknown"}
    assert key_diff.differences(a, b) == ["precision: fp32 ≠ amp(float16)",
                                      "framework version: x ≠ unknown (cannot tell whether they match)",
                                      "devices: 1 ≠ 8", "system: dgx2 ≠ rtx-ts4"]
    assert key_diff.differences(a, b, ignore={"system", "devices", "precision", "framework_version"}) == []
    assert key_diff.differences(a, dict(a)) == []


def test_spread_over_many_runs_counts_each_value():
    fp32 = {**{name: "x" for name in keys.KEY_FIELDS}, "precision": "fp32"}
    amp = {**fp32, "precision": "amp(bfloat16)", "image_digest": "unknown"}
    assert key_diff.spread([(fp32, 3), (amp, 2)]) == [
        "precision: amp(bfloat16) (2 runs) ≠ fp32 (3 runs)",
        "image digest: x (3 runs) ≠ unknown (2 runs) (cannot tell whether they match)"]
    assert key_diff.spread([(amp, 1)]) == []  # a single run matches nothing, so nothing is in doubt
    assert key_diff.spread([(amp, 2)]) == ["image digest: unknown for 2 runs (cannot tell whether they match)"]


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


# ------------------------------------------------------------------------------ site and machine in the key
A100_NODE = {"cpu": "AMD EPYC 7742", "cpu_id": "AuthenticAMD family 23 model 49 stepping 0", "isa": "x86-64-v3",
             "sockets": 2, "cores_per_socket": 64, "memory_gib": 1008,
             "gpu": "NVIDIA A100-SXM4-40GB", "gpu_count": 8, "gpu_memory_gib": 40, "driver": "535.104.05",
             "device": "cuda", "cuda": "12.2", "cudnn": "8902", "nccl": "2.18.5", "fabric": "ib",
             "fabric_rate_gbps": 200.0, "nodes": 2, "node_from": "job"}


def _keyed(fingerprint, site="a.example.org", nodes=2):
    from compare_data import record

    run, rows = record(100.0, devices=16, nodes=nodes, fabric="ib", site=site, machine=fingerprint)
    return keys.key_from_run(run, rows)


def test_the_machine_and_the_site_are_in_the_key_and_differences_name_them():
    here = _keyed(A100_NODE)
    assert {name: here[name] for name in ("site", *keys.MACHINE_FIELDS)} == {
        "site": "a.example.org", "cpu": "AMD EPYC 7742", "cpu_id": "AuthenticAMD family 23 model 49 stepping 0",
        "isa": "x86-64-v3", "cores": "2x64", "memory_gib": 1008,
        "gpu": "NVIDIA A100-SXM4-40GB", "gpu_count": 8, "gpu_memory_gib": 40, "driver": "535.104.05",
        "cuda": "12.2", "cudnn": "8902", "nccl": "2.18.5", "fabric_rate": "200 Gb/s"}
    there = _keyed({**A100_NODE, "cpu": "Intel Xeon Platinum 8480+", "cuda": "12.4"}, site="b.example.org")
    assert key_diff.differences(here, there) == ["site: a.example.org ≠ b.example.org",
                                             "cpu: AMD EPYC 7742 ≠ Intel Xeon Platinum 8480+", "cuda: 12.2 ≠ 12.4"]
    assert keys.machine_label(here) == ("AMD EPYC 7742 2x64 1008 GiB (AuthenticAMD family 23 model 49 stepping 0), "
                                         "8x NVIDIA A100-SXM4-40GB")


def test_a_run_on_cpus_has_no_cuda_stack_and_one_node_no_fabric_rate():
    cpu_run = _keyed({**A100_NODE, "device": "cpu"}, nodes=1)
    assert [cpu_run[n] for n in ("cuda", "cudnn", "nccl", "fabric_rate", "gpu")] == \
        ["n/a", "n/a", "n/a", "n/a", "NVIDIA A100-SXM4-40GB"]  # the node has GPUs; the run did not use them
    no_gpu = _keyed({**A100_NODE, "gpu_count": 0, "gpu": None, "gpu_memory_gib": None, "driver": None})
    assert [no_gpu[n] for n in ("gpu", "gpu_memory_gib", "driver", "cuda")] == ["none", "n/a", "n/a", "n/a"]


def test_a_run_without_a_fingerprint_cannot_be_shown_to_match_any_machine():
    before = _keyed(None)
    assert all(before[name] == "unknown" for name in keys.MACHINE_FIELDS)
    assert "cpu: unknown ≠ AMD EPYC 7742 (cannot tell whether they match)" in key_diff.differences(before, _keyed(A100_NODE))


def test_cpu_names_are_shortened_to_the_part():
    from dlrun.results.fingerprint import driver_version

    assert short_cpu_name("Intel(R) Xeon(R) Platinum 8480+ CPU @ 2.00GHz") == "Intel Xeon Platinum 8480+"
    assert short_cpu_name("AMD EPYC 9B45 128-Core Processor") == "AMD EPYC 9B45"
    assert short_cpu_name("POWER9, altivec supported") == "POWER9, altivec supported"
    # /proc/driver/nvidia/version as users posted it: the proprietary module
    # (https://github.com/dylanaraps/neofetch/issues/876) and the open one
    # (https://github.com/nix-community/nixGL/issues/186)
    assert driver_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  384.98  Thu Oct 26 15:16:01 PDT 2017\n"
                          "GCC version:  gcc version 7.2.0 (Ubuntu 7.2.0-8ubuntu3) \n") == "384.98"
    assert driver_version("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  565.57.01  Release Build  "
                          "(dvs-builder@U16-A24-9-2)  Thu Oct 10 12:15:00 UTC 2024\n"
                          "GCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)\n") == "565.57.01"


# ------------------------------------------------------------------ imported logs told what they are
#: Where a log ran and on what machine: said with `import-log --machine` (unknown here, where it is not).
WHERE = ("site", *keys.MACHINE_FIELDS)
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
    from dlrun.results.exchange.import_log import import_log_as_runs
    from dlrun.results.exchange.import_plan import ImportOptions
    from dlrun.results.parsers import parse_text
    from dlrun.results.store.schema import RUN_COLUMNS

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
    for name in set(keys.KEY_FIELDS) - set(WHERE):
        assert imported_key[name] == dlrun_key[name], name
    assert key_diff.has_unknown(imported_key, WHERE) == [] and key_diff.differences(imported_key, dlrun_key, WHERE) == []
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
    from dlrun.results.exchange.import_log import import_log_as_runs
    from dlrun.results.exchange.import_plan import ImportOptions

    catalog = _locked_catalog("pytorch1.0-nvcr18.11")
    [(run, rows, plan)] = import_log_as_runs(
        LOGS / "dllogger/perfreport_pytorch_rn50_8gpu_amp_stdout.log", catalog=catalog, system="dgx1v",
        local_image=with_local_image,
        options=ImportOptions(workload="resnet50", image="pytorch1.0-nvcr18.11", nodes=1))
    key = keys.key_from_run({**run, "origin": "import-log"}, rows)
    assert key_diff.has_unknown(key, WHERE) == []
    assert (key["precision"], key["batch_per_device"], key["global_batch"], key["devices"], key["nodes"]) == \
        ("amp", 128, 1024, 8, 1)
    assert (key["data"], key["data_format"], key["framework"]) == ("real:imagenet", "jpeg",
                                                                    "pytorch/deeplearningexamples")
    planned = planned_key(plan)  # the harness's run of the same plan, as far as the plan decides it
    assert [name for name in keys.KEY_FIELDS if planned[name] not in (keys.UNKNOWN, key[name])
            and name != "precision" and name not in WHERE] == ["data", "data_format", "framework"]


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
    from dlrun.results.exchange.import_log import import_log_as_runs
    from dlrun.results.exchange.import_plan import ImportOptions
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
    assert {k: v for k, v in imported_key.items() if k != "site"} == {k: v for k, v in dlrun_key.items() if k != "site"}
    assert key_diff.has_unknown(imported_key, WHERE) == ["framework_version"]  # this log prints no NCCL version line
    assert (imported_key["devices"], imported_key["nodes"], imported_key["fabric"]) == (16, 2, "ib")


def test_two_cpus_of_one_marketing_name_but_another_family_or_model_are_different_machines():
    """A cloud VM's `AMD EPYC` is Zen 2 to Zen 5: the CPU's identity and instruction set tell them apart."""
    zen4 = {**A100_NODE, "cpu": "AMD EPYC", "cpu_id": "AuthenticAMD family 25 model 17 stepping 1",
            "isa": "x86-64-v4+avx512_bf16+avx512_vnni"}
    zen5 = {**zen4, "cpu_id": "AuthenticAMD family 26 model 2 stepping 1"}
    a, b = _keyed(zen4), _keyed(zen5)
    assert keys.key_hash(a) != keys.key_hash(b)
    assert key_diff.differences(a, b) == ["cpu identity: AuthenticAMD family 25 model 17 stepping 1 ≠ "
                                          "AuthenticAMD family 26 model 2 stepping 1"]
    assert keys.machine_label(a) != keys.machine_label(b)  # compare --by host names them apart


def test_a_run_with_a_communication_variable_is_not_like_for_like_with_one_without():
    """--env NCCL_ALGO=Tree changes which algorithm NCCL runs: the key's env holds it (never a secret)."""
    from compare_data import record

    base, rows = record(100.0)
    tree = {**base, "plan": {**base["plan"], "env": {"NCCL_ALGO": "Tree", "HF_TOKEN": "hf_abcdefghijkl",
                                                     "MY_LABEL": "x"}}}
    a, b = keys.key_from_run(base, rows), keys.key_from_run(tree, rows)
    assert (a["env"], b["env"]) == ("none", "NCCL_ALGO=Tree")  # the token and the label decide nothing
    assert key_diff.differences(a, b) == ["performance environment: none ≠ NCCL_ALGO=Tree"]


def test_runs_on_different_code_paths_are_never_pooled_whoever_chose_the_knobs():
    from compare_data import REFERENCE_KNOBS, record

    run, rows = record(100.0)
    tuned = [{**rows[0], "extra": {**rows[0]["extra"], "knobs": {
        **REFERENCE_KNOBS, "fused_bn_relu": {"value": "on", "source": "tuned"}}}}]
    a, b = keys.key_from_run(run, rows), keys.key_from_run(run, tuned)
    assert (a["code_path"], b["code_path"]) == ("reference", "fused_bn_relu=on")
    assert key_diff.differences(a, b) == ["code path: reference ≠ fused_bn_relu=on"]
