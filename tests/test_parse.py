"""Parsers, on real logs published by the tools' users (tests/data/logs/SOURCES.md says where each came from)."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_cli

from dlrun.results.exchange.import_log import ORIGIN, import_log
from dlrun.results.parsers import FORMATS, ParseError, ParsedResult, list_formats, parse_all, parse_text
from dlrun.results.store import Store

LOGS = Path(__file__).parent / "data" / "logs"
DLRUN = Path(sys.executable).parent / "dlrun"


def log(name: str) -> str:
    return (LOGS / name).read_text()


# (file, value GB/s, devices, processes, GPUs per process, hosts, collective, average, rows)
NCCL = [
    ("nccl-tests/superbench_allreduce_g8.log", 235.03, 8, 1, 8, ["localhost"], "all_reduce", 68.4048, 34),
    ("nccl-tests/superbench_alltoall_g8.log", 226.16, 8, 1, 8, ["localhost"], None, 58.6481, 34),
    ("nccl-tests/pkb_allreduce_2node.log", 0.61, 2, 2, 1, ["pkb-2b6a393d-2", "pkb-2b6a393d-3"], "all_reduce",
     0.565546, 11),
    ("nccl-tests/a3mega_allreduce_2node.log", 337.35, 16, 16, 1, ["ztan-mig-235z", "ztan-mig-gq73"], "all_reduce",
     70.742, 31),
    ("nccl-tests/aws_efa_eks_tagged_2node.log", 32.84, 16, 16, 1,
     ["nccl-tests-efa-worker-0", "nccl-tests-efa-worker-1"], "all_reduce", 7.80081, 28),
]


@pytest.mark.parametrize("name,value,devices,ranks,per_rank,hosts,collective,avg,rows", NCCL)
def test_nccl_tests(name, value, devices, ranks, per_rank, hosts, collective, avg, rows):
    res = parse_text(log(name))
    assert (res.kind, res.metric, res.value, res.unit) == ("nccl-tests", "busbw", value, "GB/s")
    assert (res.num_devices, res.num_ranks, res.gpus_per_rank) == (devices, ranks, per_rank)
    assert list(res.hosts) == hosts and res.multi_node == (len(hosts) > 1)
    assert (res.collective, res.avg_busbw, len(res.sizes)) == (collective, avg, rows)
    assert res.problems == () and res.sizes[-1].ip_busbw == value


def test_nccl_tests_row_columns_across_versions():
    old = parse_text(log("nccl-tests/aws_efa_eks_tagged_2node.log")).sizes[0]  # `error` column, no root
    assert (old.size_bytes, old.count, old.type, old.redop, old.root) == (8, 2, "float", "sum", None)
    assert (old.oop_time_us, old.oop_error, old.ip_error, old.oop_wrong) == (167.5, 2e-07, 1e-07, None)
    new = parse_text(log("nccl-tests/a3mega_allreduce_2node.log")).sizes[-1]  # Group, root, #wrong
    assert (new.size_bytes, new.count, new.redop, new.root) == (8589934592, 2147483648, "sum", -1)
    assert (new.oop_time_us, new.oop_algbw, new.oop_busbw, new.oop_wrong) == (47535.0, 180.71, 338.82, 0)
    assert (new.ip_time_us, new.ip_algbw, new.ip_busbw, new.ip_wrong) == (47743.0, 179.92, 337.35, 0)
    unchecked = parse_text(log("nccl-tests/pkb_allreduce_2node.log")).sizes[0]  # -c 0: N/A
    assert (unchecked.oop_wrong, unchecked.ip_wrong, unchecked.oop_time_us) == (None, None, 2410.0)
    blank_redop = parse_text(log("nccl-tests/superbench_alltoall_g8.log")).sizes[5]
    assert (blank_redop.size_bytes, blank_redop.count, blank_redop.redop, blank_redop.root) == (32, 1, None, None)


def test_nccl_tests_two_tests_in_one_log():
    text = log("nccl-tests/xxrjun_alltoall_sendrecv_2node.log")
    alltoall, sendrecv = parse_all(text)
    assert (alltoall.collective, alltoall.value, alltoall.avg_busbw) == ("alltoall", 71.76, 69.6347)
    assert (sendrecv.collective, sendrecv.value, sendrecv.avg_busbw) == ("sendrecv", 28.62, 28.4023)
    assert alltoall.sizes[0].redop is None and sendrecv.sizes[0].redop == "sum"  # "none" means no reduction
    assert (sendrecv.num_devices, sendrecv.hosts) == (8, ("cnode4-006", "cnode4-008"))
    with pytest.raises(ParseError, match=r"holds 2 results \(alltoall, sendrecv\)"):
        parse_text(text)


def test_nccl_tests_average_that_disagrees_with_the_table_is_flagged():
    # The published PKB log with its printed average changed: the table no longer supports it.
    res = parse_text(log("nccl-tests/pkb_allreduce_2node.log").replace(": 0.565546", ": 0.665546"))
    assert not res.ok
    assert res.problems == ("'# Avg bus bandwidth' 0.665546 GB/s disagrees with the table, whose busbw values "
                            "average 0.5664 GB/s",)


def test_nccl_tests_wrong_elements_are_flagged():
    # The published a3mega log with one in-place #wrong count changed from 0 to 3.
    row = "  8589934592    2147483648     float     sum      -1    47535  180.71  338.82      0    47743  179.92  337.35"
    res = parse_text(log("nccl-tests/a3mega_allreduce_2node.log").replace(row + "      0", row + "      3"))
    assert res.sizes[-1].ip_wrong == 3
    assert res.problems == ("3 wrong elements at message sizes [8589934592] bytes",)


def test_nccl_tests_truncated_log_is_flagged():
    text = log("nccl-tests/a3mega_allreduce_2node.log").split("# Out of bounds")[0]
    res = parse_text(text)
    assert res.value == 337.35 and res.avg_busbw is None
    assert res.problems == ("no '# Avg bus bandwidth' line: the log ends before the test finished",)


def test_nccl_tests_header_without_rows_is_an_error():
    text = log("nccl-tests/a3mega_allreduce_2node.log").split("#       size")[0]
    with pytest.raises(ParseError, match="header but no result rows"):
        parse_text(text)


@pytest.mark.parametrize("name,value,model,batch,devices", [
    ("horovod/issue712_pytorch_synthetic_4gpu.log", 432.8, "resnet50", 32, 4),
    ("horovod/issue2686_horovodrun_gloo_1gpu.log", 124.7, "resnet50", 32, 1),
])
def test_horovod_synthetic_benchmark(name, value, model, batch, devices):
    res = parse_text(log(name))
    assert (res.kind, res.metric, res.value, res.unit) == ("horovod", "throughput", value, "images/sec")
    assert (res.model, res.batch_size, res.num_devices) == (model, batch, devices)
    assert len(res.extra["iterations"]) == 10 and res.extra["device"] == "GPU"


def test_horovod_keeps_the_per_device_figures():
    res = parse_text(log("horovod/issue712_pytorch_synthetic_4gpu.log"))
    assert (res.extra["per_device"], res.extra["confidence_95"]) == (108.2, 4.9)
    assert res.extra["iterations"][0] == 108.3


@pytest.mark.parametrize("name,value", [
    ("tf_cnn_benchmarks/tfbenchmarks_pr63_1gpu_2017.log", 138.95),
    ("tf_cnn_benchmarks/tensorflow23032_1gpu_nightly.log", 197.98),
    ("tf_cnn_benchmarks/horovod466_mpirun_1gpu.log", 204.75),
])
def test_tf_cnn_benchmarks(name, value):
    res = parse_text(log(name))
    assert (res.kind, res.metric, res.value, res.unit) == ("tf_cnn_benchmarks", "throughput", value, "images/sec")
    # These published excerpts start at the step table: no header, so no model, batch or device count.
    assert (res.model, res.batch_size, res.num_devices, res.extra["reports"]) == (None, None, None, [value])


# Logs with tf_cnn_benchmarks' header: (file, value, model, batch per device, devices, processes, variables, data)
TF_CNN_HEADERS = [
    ("tf_cnn_benchmarks/lambda_rtx3080_replicated_2gpu_tf1.15.log", 735.72, "resnet50", 56, 2, 1, "replicated",
     "synthetic"),
    ("tf_cnn_benchmarks/mpioperator_horovod_2gpu_tf1.14.log", 308.27, "resnet101", 64, 2, 2, "horovod", "synthetic"),
]


@pytest.mark.parametrize("name,value,model,batch,devices,processes,variables,data", TF_CNN_HEADERS)
def test_tf_cnn_benchmarks_header(name, value, model, batch, devices, processes, variables, data):
    res = parse_text(log(name))
    assert (res.value, res.model, res.batch_size, res.num_devices, res.num_ranks) == \
        (value, model, batch, devices, processes)
    assert (res.extra["variables"], res.extra["data_source"], res.extra["data_format"]) == (variables, data, "NCHW")
    assert res.extra["global_batch_size"] == batch * devices and res.problems == ()
    assert re.fullmatch(r"the `total images/sec` line \(line \d+\)", res.value_is), res.value_is


def test_tf_cnn_benchmarks_counts_devices_from_the_batch_line_not_the_ranks_that_printed():
    # Two Horovod ranks each printing the header and a total (as they do): the Devices list already names
    # both workers, so the device count stays 2 (it used to be multiplied by the number of reports).
    text = log("tf_cnn_benchmarks/mpioperator_horovod_2gpu_tf1.14.log")
    tagged = "\n".join(f"[1,{rank}]<stdout>:{line}" for rank in (1, 0) for line in text.splitlines())
    res = parse_text(tagged)
    assert (res.num_devices, res.num_ranks, res.extra["reports"]) == (2, 2, [308.27, 308.27])
    assert res.value_is.startswith("the `total images/sec` line of rank 0 (each of the 2 reports")


def test_a_log_of_two_runs_says_which_total_it_took(tmp_path):
    """Two untagged `total images/sec` lines that are no Horovod workers' reports (issue 36: the first was
    taken silently): the value is the first, and value_is says so, with where the others are."""
    text = log("tf_cnn_benchmarks/tfbenchmarks_pr63_1gpu_2017.log")
    res = parse_text(text + text.replace("total images/sec: 138.95", "total images/sec: 120.5"))
    first = text.splitlines().index("total images/sec: 138.95") + 1
    second = first + len(text.splitlines())
    assert (res.value, res.extra["reports"]) == (138.95, [138.95, 120.5])
    assert res.value_is == (f"the first of 2 `total images/sec` lines (line {first}; the others, line {second}: "
                            "120.5, are kept in `reports`): a log of several runs? split it to import each")
    (tmp_path / "two.log").write_text(text + text)
    shown = run_cli("parse", str(tmp_path / "two.log"))
    assert "the first of 2 `total images/sec` lines" in " ".join(shown.stdout.split()), shown.stdout


def test_tf_cnn_benchmarks_forward_only_is_not_a_training_throughput():
    res = parse_text(log("tf_cnn_benchmarks/lambda_rtx3080_forward_only_1gpu_tf1.15.log"))
    assert (res.value, res.num_devices, res.extra["mode"]) == (3330.51, 1, "forward only")
    assert res.problems == ("tf_cnn_benchmarks ran in mode forward only: its images/sec is not a training "
                            "throughput",)


# DeepLearningExamples logs (dllogger): (file, value, value_is, model, batch, devices, precision, data, compute)
DLLOGGER = [
    ("dllogger/perfreport_pytorch_rn50_8gpu_amp_stdout.log", 6014.71, "train.total_ips of the summary line",
     "resnet50", 128, 8, "amp", "jpeg", 6058.55),
    ("dllogger/perfreport_tensorflow_rn50_1gpu_amp_stdout.log", 954.9404604342288,
     "train_throughput of the summary line", "resnet50", 128, None, "amp", "tfrecord", None),
    ("dllogger/dllogger_example_resnet_json.log", 661.9801574510492, "train.total_ips of the summary line",
     "resnet50", 128, 1, "amp", "jpeg", 663.9765207522363),
]


@pytest.mark.parametrize("name,value,value_is,model,batch,devices,precision,data,compute", DLLOGGER)
def test_dllogger(name, value, value_is, model, batch, devices, precision, data, compute):
    res = parse_text(log(name))
    assert (res.kind, res.metric, res.value, res.unit, res.value_is) == \
        ("dllogger", "throughput", value, "images/sec", value_is)
    assert (res.model, res.batch_size, res.num_devices, res.extra["precision"]) == (model, batch, devices, precision)
    assert (res.extra["data_source"], res.extra["compute_only_rate"], res.problems) == (data, compute, ())


def test_dllogger_takes_the_end_to_end_rate_not_the_compute_only_one():
    # The JSON summary logs train.total_ips on one line and train.compute_ips (higher: no data loading) on the
    # next; the stdout summary does the same. The end-to-end figure is the one reported.
    for name in ("dllogger/dllogger_example_resnet_json.log", "dllogger/perfreport_pytorch_rn50_8gpu_amp_stdout.log"):
        res = parse_text(log(name))
        assert res.extra["key"] == "train.total_ips" and res.value < res.extra["compute_only_rate"]


def test_dllogger_without_an_end_to_end_rate_says_it_took_the_compute_only_one():
    # The published 8-GPU log with every train.total_ips line taken out.
    text = "\n".join(line for line in log("dllogger/perfreport_pytorch_rn50_8gpu_amp_stdout.log").splitlines()
                     if "train.total_ips" not in line)
    res = parse_text(text)
    assert (res.value, res.extra["key"]) == (6058.55, "train.compute_ips")
    assert "compute only, without data loading" in res.value_is


def test_dllogger_iteration_lines_only_give_the_mean_after_warm_up():
    # The published 8-GPU log cut to its PARAMETER and iteration lines (no epoch or summary line).
    lines = log("dllogger/perfreport_pytorch_rn50_8gpu_amp_stdout.log").splitlines()
    res = parse_text("\n".join(line for line in lines if "Iteration" in line or "PARAMETER" in line))
    rates = [float(line.split("train.total_ips : ")[1].split()[0]) for line in lines if "Iteration" in line]
    assert len(rates) == 99 and res.value == pytest.approx(sum(rates[49:]) / 50)
    assert res.value_is == ("mean of train.total_ips over the last 50 of 99 iteration lines (the first 49 count as "
                            "warm-up; no summary or epoch line)")
    # 1024 images per iteration, 0.16 s apart: the printed rate agrees with the line times
    assert res.problems == () and res.extra["wall_clock_rate"] == pytest.approx(res.value, rel=0.01)


def test_dllogger_a_rate_the_line_times_cannot_allow_is_flagged():
    # The log quoted in DLPerf: 16 GPUs x 128 images per iteration, lines 0.40 s apart (5,137 img/s), but
    # train.total_ips prints about 10,300: DeepLearningExamples stopped the clock before the GPUs finished.
    res = parse_text(log("dllogger/dlperf_pytorch_rn50_2n8g_fp32_stdout.log"))
    assert (res.value, res.num_devices, res.batch_size, res.extra["precision"]) == \
        (pytest.approx(10290.795), 16, 128, "fp32")
    assert res.extra["wall_clock_rate"] == pytest.approx(5137.2954, abs=1e-3)
    assert res.problems == ("train.total_ips averages 10,290.8 images/sec over the iterations used, 2.0x the "
                            "5,137.3 images/sec their line times allow (128 x 16 images per iteration); the "
                            "printed rate cannot be right",)


def test_dllogger_tensorflow_tuple_steps_and_launcher_tags():
    text = log("dllogger/perfreport_tensorflow_rn50_1gpu_amp_stdout.log").split("DLL 2020-12-16 07:26:00.914848")[0]
    res = parse_text(text)  # without its `() train_throughput` summary: the `(0, 200) total_ips` lines
    assert res.value_is.startswith("mean of total_ips over the last 150 of 300 iteration lines")
    # the same lines as mpirun --tag-output prints them, with rank 1's copy (other numbers) interleaved
    rank1 = text.replace("total_ips : 9", "total_ips : 1")
    tagged = "\n".join(f"[1,{rank}]<stdout>:{line}" for pair in zip(text.splitlines(), rank1.splitlines())
                       for rank, line in zip((0, 1), pair))
    assert parse_text(tagged).value == res.value


#: Logs of runs that failed before they measured anything: one line, no figure (tests/test_parse_2026.py).
FAILED_RUNS = {"nccl-tests/nccl_tests_allreduce_rank_failure_8xh100_azure_stdout.log",
               "megatron/megatron_lm_gpt2_774m_v100_oom_terminal.log"}


@pytest.mark.parametrize("name", sorted(str(p.relative_to(LOGS)) for p in LOGS.rglob("*.log")
                                        if p.parent.name != "launcher-failures"
                                        and str(p.relative_to(LOGS)) not in FAILED_RUNS))
def test_every_result_says_which_figure_it_took(name):
    for res in parse_all(log(name)):
        assert res.value_is and res.to_dict()["value_is"] == res.value_is


@pytest.mark.parametrize("name,value,throughputs,status", [
    ("mllog/lambda_v4.0_bert_srun_label.log", 12792.219630021962, [14214.65962521748, 12792.219630021962],
     "aborted"),
    ("mllog/lambda_v4.0_llama2_70b_lora_srun_label.log", 1.9257918929116467, [1.9257918929116467], "success"),
])
def test_mlperf_mllog(name, value, throughputs, status):
    res = parse_text(log(name))
    assert (res.kind, res.metric, res.value, res.unit) == ("mllog", "throughput", value, "samples/sec")
    assert (res.extra["throughputs"], res.extra["run_status"], res.extra["malformed_lines"]) == \
        (throughputs, status, 0)


def test_naming_the_format():
    text = log("horovod/issue712_pytorch_synthetic_4gpu.log")
    assert parse_text(text, fmt="horovod").value == 432.8
    with pytest.raises(ParseError, match="no nccl-tests result found"):
        parse_text(text, fmt="nccl-tests")
    with pytest.raises(ParseError, match="unknown log format 'ncl-tests'; did you mean 'nccl-tests'") as err:
        parse_text(text, fmt="ncl-tests")
    assert err.value.exit_code == 2


def test_list_formats():
    assert [name for name, _ in list_formats()] == list(FORMATS) == \
        ["dlrun-harness", "nccl-tests-json", "nccl-tests", "tf_cnn_benchmarks", "horovod", "dllogger", "mllog",
         "torchtitan", "megatron-lm", "nemo", "osu", "fio"]


#: A training result with every field the contract's schema requires of one (harness_result_schema).
TRAINING_RESULT = {"metric": "throughput", "value": 12.5, "unit": "images/sec", "model": "resnet18",
                   "batch_size_per_rank": 4, "world_size": 2, "num_devices": 2, "formula": "x", "status": "ok",
                   "harness_version": "1", "device": "cpu", "framework": "pytorch", "framework_version": "2.13.0",
                   "precision": "fp32", "precision_ran": "fp32", "global_batch_size": 8, "timed_steps": 3,
                   "warmup_steps": 1, "wall_time_s": 1.9}


def test_dlrun_result_line():
    text = ("Step\tImg/sec\ttotal_loss\ntotal images/sec: 12.50\nDLRUN_RESULT " + json.dumps(TRAINING_RESULT)
            + "\n")
    res = parse_text(text)
    assert (res.kind, res.value, res.model, res.batch_size, res.num_devices) == \
        ("dlrun-harness", 12.5, "resnet18", 4, 2)


def _result(raw_value: str | None = None, **fields) -> str:
    """TRAINING_RESULT with `fields`, its value written as the JSON text `raw_value` (NaN, 1e999) where given."""
    text = json.dumps({**TRAINING_RESULT, **fields})
    return text.replace('"value": 12.5', f'"value": {raw_value}') if raw_value else text


@pytest.mark.parametrize("payload,message", [
    ("[" * 100000, "nested too deeply"),
    ("5", "followed by a JSON int, expected an object"),
    (_result("NaN"), r"breaks dlrun's result schema: field value is not finite"),
    (_result(value=-3.0), r"throughput value must be finite and >= 0, got -3.0"),
    (_result("1e999"), r"breaks dlrun's result schema: field value is not finite"),
    ('{"value": ' + "9" * 5000 + "}", "malformed JSON"),
    (_result(unit="furlongs"), "unit 'furlongs' is not one of"),
    (_result(world_size=2.5), "breaks dlrun's result schema: field world_size is a float, not a int"),
    (json.dumps({k: v for k, v in TRAINING_RESULT.items() if k != "wall_time_s"}),
     r"^the DLRUN_RESULT line breaks dlrun's result schema: field wall_time_s \(.*\) is missing$"),
])
def test_dlrun_result_nonsense_is_refused(payload, message):
    """Each refusal is one line: the schema's (the contract both sides import), then the result's own checks."""
    with pytest.raises(ParseError, match=message):
        parse_text("DLRUN_RESULT " + payload)


def test_two_result_lines_are_an_error():
    line = "DLRUN_RESULT " + json.dumps({"value": 1.0}) + "\n"
    with pytest.raises(ParseError, match="expected one DLRUN_RESULT line, found 2"):
        parse_text(line * 2)


def test_parsed_result_refuses_nonsense():
    with pytest.raises(ParseError, match="must be finite and >= 0, got nan"):
        ParsedResult(kind="x", metric="throughput", value=float("nan"), unit="images/sec")
    with pytest.raises(ParseError, match="num_devices must be between 1 and"):
        ParsedResult(kind="x", metric="busbw", value=1.0, unit="GB/s", num_devices=0)


def test_no_result():
    with pytest.raises(ParseError, match="no result found"):
        parse_text("hello\nworld\n")


def test_import_log_marks_origin_and_stores(tmp_path):
    path = LOGS / "nccl-tests/a3mega_allreduce_2node.log"
    [(run, rows)] = import_log(path, system="dgx2", now=0)
    assert run["provenance"]["origin"] == ORIGIN and run["plan"]["origin"] == ORIGIN
    assert run["provenance"]["log_sha256"] == __import__("hashlib").sha256(path.read_bytes()).hexdigest()
    assert (run["status"], run["system"], run["nodes"], run["ranks_per_node"], run["world_size"]) == \
        ("ok", "dgx2", 2, 8, 16)
    assert (run["workload"], rows[0]["value"], rows[0]["unit"]) == ("nccl-tests:all_reduce", 337.35, "GB/s")
    store = Store(tmp_path / "results.sqlite")
    store.add_run(run, rows)
    shown = store.get_run(run["id"])
    assert shown["provenance"]["origin"] == ORIGIN and shown["results"][0]["value"] == 337.35


def test_import_log_with_problems_is_a_failed_run_without_rows(tmp_path):
    path = tmp_path / "changed.log"
    path.write_text(log("nccl-tests/pkb_allreduce_2node.log").replace(": 0.565546", ": 0.665546"))
    [(run, rows)] = import_log(path, system="dgx2")
    assert run["status"] == "failed" and rows == []
    assert "disagrees with the table" in run["provenance"]["reason"]
    assert run["provenance"]["parsed"]["avg_busbw"] == 0.665546


def test_parse_cli_json(dlrun_home):
    proc = run_cli("parse", str(LOGS / "horovod/issue712_pytorch_synthetic_4gpu.log"), "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert (data["kind"], data["value"], data["num_devices"], data["model"]) == ("horovod", 432.8, 4, "resnet50")


def test_parse_cli_says_which_figure_and_what_is_wrong(dlrun_home):
    data = json.loads(run_cli("parse", str(LOGS / "dllogger/dllogger_example_resnet_json.log"), "--json",
                              check=True).stdout)
    assert (data["value"], data["value_is"]) == (661.9801574510492, "train.total_ips of the summary line")
    table = run_cli("parse", str(LOGS / "dllogger/dlperf_pytorch_rn50_2n8g_fp32_stdout.log"), check=True).stdout
    assert "value_is" in table and "mean of train.total_ips over the last 6 of 12" in table
    assert "2.0x the 5,137.3 images/sec their line times allow" in " ".join(table.split())


@pytest.mark.parametrize("content", [b"nothing here\nat all\n", b"\xff\xfe\x00junk \xc3\x28 total images/sec: \xff\n",
                                     b"DLRUN_RESULT " + b"[" * 50000 + b"\n"])
def test_parse_cli_bad_file_one_line_no_traceback(dlrun_home, tmp_path, content):
    path = tmp_path / "bad.log"
    path.write_bytes(content)
    proc = subprocess.run([str(DLRUN), "parse", str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("dlrun: error: ")
    assert "Traceback" not in proc.stderr + proc.stdout


# (file, kind, value, unit, what value_is must say). Each value by hand from the file: the global batch over the
# median step time of the logged steps but the first (none of these logs states its sequence length).
LLM_LOGS = [
    # iterations 11 and 12: 10036.9 and 10198.4 ms, median 10117.65 ms; global batch size 128
    ("megatron/megatron_lm_issue756_mixtral_16xh100_iter10-12.log", "megatron-lm", 128 / 10.11765, "samples/sec",
     r"^derived: global batch size 128 samples / the median `elapsed time per iteration \(ms\)` over iterations "
     r"11-12 \(the first logged, 10, left out"),
    # iterations 44 and 45: 5533.8 and 5718.6 ms, median 5626.2 ms
    ("megatron/megatron_lm_issue756_mixtral_16xh100_iter43-45.log", "megatron-lm", 128 / 5.6262, "samples/sec",
     r"over iterations 44-45 .*5626\.2 ms \(the log states no seq_length, so no tokens/s\)$"),
    # Megatron-Bridge's one iteration after a checkpoint load: 20289.1 ms, global batch size 128
    ("megatron/megatron_bridge_llama31_8b_dgxc_resume_1iter.log", "megatron-lm", 128 / 20.2891, "samples/sec",
     r"over iteration 1, the only one logged, 20289\.1 ms"),
    # NeMo 2 steps 75 and 76: 8.748 and 8.756 s, median 8.752 s; global_batch_size 128
    ("nemo/nemo2_llama3_70b_aws_perf_readme.log", "nemo", 128 / 8.752, "samples/sec",
     r"^derived: global batch size 128 \(global_batch_size\) samples / the median `train_step_timing in s` over "
     r"steps 75-76"),
    # NeMo 1's bar, one redraw: 11.20 s; consumed_samples 12800 after global_step 99 is 100 steps of 128
    ("nemo/nemo1_llama31_70b_dgxc_progress_bar.log", "nemo", 128 / 11.20, "samples/sec",
     r"global batch size 128 \(derived from the bar as consumed_samples / \(global_step \+ 1\) = 12800 / 100\) "
     r"samples / the median `train_step_timing in s` over step 99, the only one logged, 11\.2 s"),
]


@pytest.mark.parametrize("name,kind,value,unit,value_is", LLM_LOGS, ids=[row[0] for row in LLM_LOGS])
def test_megatron_and_nemo_logs_give_the_figure_computed_by_hand(name, kind, value, unit, value_is):
    from dlrun.results.parsers.common import LogFile

    for source in (log(name), LogFile(LOGS / name, 10**8)):  # as text and read a line at a time
        [res] = parse_all(source)
        assert (res.kind, res.metric, res.unit) == (kind, "throughput", unit)
        assert res.value == pytest.approx(value, rel=1e-12) and res.ok, res.problems
        assert re.search(value_is, res.value_is), res.value_is


def test_megatron_keeps_the_printed_tflops_and_what_the_figure_came_from():
    res = parse_text(log("megatron/megatron_lm_issue756_mixtral_16xh100_iter43-45.log"))
    assert res.extra["median_tflops_per_gpu_printed"] == pytest.approx((236.0 + 228.4) / 2)
    assert (res.extra["logged_iterations"], res.extra["timed_iterations"]) == ([43, 44, 45], [44, 45])
    assert (res.extra["global_batch_size"], res.extra["train_iters"], res.extra["final_lm_loss"]) == \
        (128, 100, 1.834162)
    # The same lines under torchrun's `[default7]:` tag, and with a sequence length stated: tokens/s
    text = "  seq_length ...................................... 4096\n" + "".join(
        f"[default7]:{line}\n" for line in log("megatron/megatron_lm_issue756_mixtral_16xh100_iter43-45.log")
        .splitlines())
    tokens = parse_text(text)
    assert tokens.unit == "tokens/sec" and tokens.value == pytest.approx(128 * 4096 / 5.6262, rel=1e-12)
    assert "x seq_length 4096 tokens (the arguments dump)" in tokens.value_is


def test_nemo_keeps_the_printed_tflops():
    res = parse_text(log("nemo/nemo2_llama3_70b_aws_perf_readme.log"))
    assert res.extra["median_TFLOPS_per_GPU_printed"] == pytest.approx((867.7 + 866.9) / 2)
    assert (res.extra["logger"], res.extra["step_lines"], res.extra["final_reduced_train_loss"]) == ("NeMo 2", 3, 11.87)
    assert parse_text(log("nemo/nemo1_llama31_70b_dgxc_progress_bar.log")).extra["logger"] == "NeMo 1"


def test_the_failed_megatron_run_gives_one_line_and_no_number(dlrun_home):
    name = "megatron/megatron_lm_gpt2_774m_v100_oom_terminal.log"
    with pytest.raises(ParseError) as err:
        parse_all(log(name))
    assert str(err.value).startswith("Megatron-LM stopped before its first iteration line; the log says: "
                                     "'torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 786.00 MiB")
    proc = run_cli("parse", str(LOGS / name))
    assert proc.returncode == 1 and proc.stdout == "" and proc.stderr == f"dlrun: error: {err.value}\n"


@pytest.mark.parametrize("name", [row[0] for row in LLM_LOGS])
def test_megatron_and_nemo_logs_import_as_runs(name):
    [(run, rows)] = import_log(LOGS / name, system="site-a")
    assert run["status"] == "ok" and rows and rows[0]["unit"] == "samples/sec"
    assert rows[0]["value"] == pytest.approx(dict((r[0], r[2]) for r in LLM_LOGS)[name], rel=1e-12)
    assert run["workload"].startswith(rows[0]["kind"]) and json.dumps(rows[0]["extra"])
