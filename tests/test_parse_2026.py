"""The logs sites produce in 2026 (tests/data/logs/SOURCES.md says where each was published): nccl-tests 2.17-2.19
tables and `-J` JSON, a failed nccl-tests run, OSU 7.5 with its validation column, MLPerf Training v4.0 and v5.1
result logs (Llama 3.1 8B: tokens/s derived), torchtitan on H100 and B200, fio 3.16 JSON. Each gives its figure,
and says which printed figure it is or how it was derived; the failed run gives one line and no number."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import run_cli

from dlrun.results.exchange.import_log import import_log
from dlrun.results.parsers import ParseError, parse_all, parse_text
from dlrun.results.parsers.common import LogFile

LOGS = Path(__file__).parent / "data" / "logs"

# (file, kind, metric, value, unit, what value_is must say: which line, column or statistic, derived or printed)
REAL_LOGS = [
    ("nccl-tests/nccl_tests_allreduce_2node_8xgh200_cscs_cxi.log", "nccl-tests", "busbw", 123.11, "GB/s",
     r"^the in-place busbw column at the largest message size \(134217728 bytes\)$"),
    ("nccl-tests/nccl_tests_allreduce_2node_8xgh200_cscs_nocxi_degraded.log", "nccl-tests", "busbw", 5.41, "GB/s",
     r"^the in-place busbw column at the largest message size \(134217728 bytes\)$"),
    ("nccl-tests/nccl_tests_allreduce_8xh100_dgxc_readme.log", "nccl-tests", "busbw", 479.99, "GB/s",
     r"^the in-place busbw column at the largest message size \(17179869184 bytes\)$"),
    ("nccl-tests/nccl_tests_json_v3_allreduce_8xh100_azure_ndv5.json", "nccl-tests", "busbw", 479.686103, "GB/s",
     r"^the in-place busbw column at the largest message size \(17179869184 bytes\)$"),
    ("osu/osu_bw_v7.5_cpu_internode_cscs_cxi.log", "osu", "bandwidth", 23.98218, "GB/s",
     r"^bandwidth at the largest message, 4194304 bytes \(23982\.18 MB/s, OSU's MB = 10\^6 bytes, / 1000\)$"),
    ("osu/osu_bw_v7.5_cpu_internode_cscs_nocxi_degraded.log", "osu", "bandwidth", 3.12142, "GB/s",
     r"^bandwidth at the largest message, 4194304 bytes \(3121\.42 MB/s"),
    ("osu/osu_alltoall_v7.5_gpu_8rank_cscs_cxi.log", "osu", "latency", 22.26, "us",
     r"^avg latency\(us\) at the smallest message, 1 bytes$"),
    ("mllog/mlperf_v4.0_bert_h200_pytorch_result_0.log", "mllog", "throughput", 7972.099054868177, "samples/sec",
     r"^the last of the 17 throughputs logged"),
    ("mllog/mlperf_v4.0_resnet_h200_mxnet_result_0.log", "mllog", "throughput", 63559.49790029429, "samples/sec",
     r"^the last of the 35 throughputs logged"),
    ("mllog/mlperf_v5.1_llama31_8b_gb200_nemo_result_0.log", "mllog", "throughput", 16 * 8192 / 0.40494847297668457,
     "tokens/sec", r"^derived, the log prints no throughput: global_batch_size 16 x max_sequence_length 8192 "
                   r"tokens / the median train_step_time \(0\.404948 s, of the 350 tracked_stats that log one\)$"),
    ("torchtitan/torchtitan_pr1437_8xh100_dsv3_debug_flex_rank0.log", "torchtitan", "throughput", 34692.0 * 8,
     "tokens/sec", r"^derived: median over steps 2-10 .* of each step's mean per-GPU tps .*over the 1 line\(s\) per "
                   r"step\) x 8 GPUs, from the device mesh the log builds \(\[8\]\)$"),
    ("torchtitan/torchtitan_pr2389_8xb200_noac_bf16gate_allranks.log", "torchtitan", "throughput", 12437.25 * 8,
     "tokens/sec", r"^derived: median over steps 2-10 .* over the 8 line\(s\) per step\) x 8 GPUs, from the 8 "
                   r"untagged lines logged for one step, one per rank$"),
    ("fio/fio_json_3.16_randrw_4k_nvme_superbench.json", "fio", "bandwidth", 0.697194164, "GB/s", r"read"),
]
FAILED = "nccl-tests/nccl_tests_allreduce_rank_failure_8xh100_azure_stdout.log"


def test_the_table_holds_every_2026_log():
    named = {name for name, *_ in REAL_LOGS} | {FAILED}
    listed = (LOGS / "SOURCES.md").read_text()
    assert len(named) == 14 and all(f"`{name}`" in listed for name in named)


@pytest.mark.parametrize("name,kind,metric,value,unit,value_is", REAL_LOGS, ids=[row[0] for row in REAL_LOGS])
def test_every_2026_log_gives_its_named_figure(name, kind, metric, value, unit, value_is):
    for source in ((LOGS / name).read_text(), LogFile(LOGS / name, 10**8)):  # as text and read a line at a time
        [res] = parse_all(source)
        assert (res.kind, res.metric, res.unit) == (kind, metric, unit)
        assert res.value == pytest.approx(value, rel=1e-12) and res.ok, res.problems
        assert re.search(value_is, res.value_is), res.value_is


def test_the_failed_nccl_tests_run_gives_one_line_and_no_number(dlrun_home):
    with pytest.raises(ParseError) as err:
        parse_all((LOGS / FAILED).read_text())
    assert str(err.value) == ("nccl-tests stopped before its first result row; the log says: 'Invalid number of "
                              "GPUs: 297 requested but only 8 were found.'")
    proc = run_cli("parse", str(LOGS / FAILED))
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr == f"dlrun: error: {err.value}\n"


def test_nccl_tests_json_quirks_devices_and_versions():
    res = parse_text((LOGS / "nccl-tests/nccl_tests_json_v3_allreduce_8xh100_azure_ndv5.json").read_text())
    [row] = res.sizes
    assert (row.size_bytes, row.count, row.type, row.redop, row.root) == (17179869184, 4294967296, "float", "sum", -1)
    assert (row.oop_busbw, row.ip_time_us, row.oop_wrong, row.ip_wrong) == (480.902491, 62675.926806, 0, 0)
    assert (res.collective, res.avg_busbw, res.num_devices, res.num_ranks, res.hosts) == \
        ("all_reduce", 480.294297, 8, 8, ("nccl-json",))
    assert res.extra["nccl_version"] == "2.23.4" and res.extra["json_format_version"] == 3
    assert res.extra["errors"] == [] and res.extra["device_names"] == ["NVIDIA H100 80GB HBM3"]
    assert res.problems == ()  # "okay": "unchecked" is no failure; "errors": [""] is no error


def test_nccl_tests_2_19_header_names_its_versions():
    # The failed run's header is nccl-tests 2.19.7's: its version line names the NCCL library.
    text = (LOGS / "nccl-tests/nccl_tests_allreduce_8xh100_dgxc_readme.log").read_text()
    assert parse_text(text).extra.get("nccl_tests_version") is None  # an excerpt without that line
    with pytest.raises(ParseError, match="Invalid number of GPUs"):
        parse_text((LOGS / FAILED).read_text())


def test_osu_validation_column_is_kept_and_a_failure_is_a_problem():
    text = (LOGS / "osu/osu_bw_v7.5_cpu_internode_cscs_cxi.log").read_text()
    res = parse_text(text)
    assert res.extra["columns"] == ["Bandwidth (MB/s)", "Validation"]
    assert {row["validation"] for row in res.extra["sizes"]} == {"Pass"} and len(res.extra["sizes"]) == 23
    failed = parse_text(text.replace("23982.18              Pass", "23982.18              Fail"))
    assert failed.problems == ("OSU's validation failed at message sizes [4194304] bytes",)
    with pytest.raises(ParseError, match="OSU Validation: 'Maybe' is neither Pass nor Fail"):
        parse_text(text.replace("0.95              Pass", "0.95              Maybe"))


def test_mlperf_llama_keeps_what_the_figure_was_derived_from():
    res = parse_text((LOGS / "mllog/mlperf_v5.1_llama31_8b_gb200_nemo_result_0.log").read_text())
    assert res.model == "llama31_8b" and res.extra["run_status"] == "success"
    assert res.extra["derived_from"] == {"global_batch_size": 16, "max_sequence_length": 8192,
                                         "median_train_step_time_s": 0.40494847297668457, "train_step_times": 350}
    assert res.extra["samples_per_sec"] == pytest.approx(16 / 0.40494847297668457)


def test_torchtitan_reads_every_rank_line_separators_tags_and_colours():
    text = (LOGS / "torchtitan/torchtitan_pr2389_8xb200_noac_bf16gate_allranks.log").read_text()
    res = parse_text(text)
    assert res.extra["step_lines"] == 80 and res.extra["logged_steps"] == list(range(1, 11))
    assert res.extra["per_step_tps_per_device"]["4"] == pytest.approx((12452 * 4 + 12451 * 2 + 12453 * 2) / 8)
    assert (res.extra["median_tflops_per_device"], res.extra["median_mfu_pct"]) == (389.445, 17.31)
    # The same lines as a terminal shows them: torchtitan colours each field (its Color class's escapes).
    coloured = re.sub(r"(step|loss|grad_norm|memory|tps|tflops|mfu):", lambda m: f"\x1b[33m{m.group(1)}:", text)
    coloured = coloured.replace("%\n", "%\x1b[39m\n")
    assert parse_text(coloured).value == res.value
    tagged = parse_text((LOGS / "torchtitan/torchtitan_pr1437_8xh100_dsv3_debug_flex_rank0.log").read_text())
    assert (tagged.model, tagged.batch_size, tagged.num_devices) == ("deepseek_v3 debugmodel_flex_attn", 8, 8)
    assert tagged.extra["per_step_tps_per_device"]["2"] == 34387.0  # `34,387`
    assert (tagged.extra["global_batch"], tagged.extra["seq_len"], tagged.extra["final_loss"]) == (64, 2048, 3.9119)


@pytest.mark.parametrize("name", [row[0] for row in REAL_LOGS if row[1] != "fio"])
def test_every_2026_log_imports_as_a_run(name):
    [(run, rows)] = import_log(LOGS / name, system="site-a")
    assert run["status"] == "ok" and rows and rows[0]["unit"] == dict((r[0], r[4]) for r in REAL_LOGS)[name]
    assert rows[0]["value"] == pytest.approx(dict((r[0], r[3]) for r in REAL_LOGS)[name], rel=1e-12)
    assert run["workload"].startswith(rows[0]["kind"]) and json.dumps(rows[0]["extra"])
