"""The parsers of bring-your-own workloads' tools, on outputs their users published (tests/data/logs/osu/README.md
and tests/data/logs/fio/README.md say where each came from): OSU Micro-Benchmarks and fio's JSON."""
from __future__ import annotations

from pathlib import Path

import pytest

from dlrun.results.parsers import ParseError, parse_all, parse_text

LOGS = Path(__file__).parent / "data" / "logs"


def log(name: str) -> str:
    return (LOGS / name).read_text()


# (file, benchmark, metric, value, unit, version, rows, value_is starts with)
OSU = [
    ("osu/libfabric_cray_pr859_latency_v5.0.log", "osu_latency", "latency", 1.84, "us", "5.0", 24,
     "latency (us) at the smallest message, 0 bytes"),
    ("osu/libfabric_pr8680_latency_v7.0.log", "osu_latency", "latency", 0.22, "us", "7.0-lrbison3", 14,
     "latency (us) at the smallest message, 0 bytes"),
    ("osu/eessi_pr716_bw_cuda_v7.2.log", "osu_bw", "bandwidth", 93.13052, "GB/s", "7.2", 26,
     "bandwidth at the largest message, 33554432 bytes (93130.52 MB/s"),
    ("osu/ucx4274_bw_v5.6.2.log", "osu_bw", "bandwidth", 1.78515, "GB/s", "5.6.2", 23,
     "bandwidth at the largest message, 4194304 bytes (1785.15 MB/s"),
    ("osu/ompi12318_reduce_cuda_full_v7.3.log", "osu_reduce", "latency", 53.34, "us", "7.3", 11,
     "avg latency(us) at the smallest message, 1 bytes"),
]


@pytest.mark.parametrize("name,benchmark,metric,value,unit,version,rows,value_is", OSU)
def test_osu(name, benchmark, metric, value, unit, version, rows, value_is):
    res = parse_text(log(name))  # found without naming the format
    assert (res.kind, res.metric, res.unit, res.problems) == ("osu", metric, unit, ())
    assert res.value == pytest.approx(value, rel=1e-12)
    assert (res.extra["benchmark"], res.extra["osu_version"], len(res.extra["sizes"])) == (benchmark, version, rows)
    assert res.extra["value_is"].startswith(value_is)
    sizes = [row["bytes"] for row in res.extra["sizes"]]
    assert sizes == sorted(sizes) and parse_text(log(name), "osu") == res


def test_osu_columns_buffers_and_datatype():
    bw = parse_text(log("osu/eessi_pr716_bw_cuda_v7.2.log"))
    assert (bw.extra["device_buffers"], bw.extra["datatype"], bw.extra["columns"]) == ("cuda", "MPI_CHAR",
                                                                                        ["Bandwidth (MB/s)"])
    assert bw.extra["sizes"][15] == {"bytes": 32768, "bandwidth_mbs": 7994.64}
    full = parse_text(log("osu/ompi12318_reduce_cuda_full_v7.3.log"))
    assert full.extra["columns"] == ["Avg Latency(us)", "Min Latency(us)", "Max Latency(us)", "Iterations"]
    assert full.extra["sizes"][-1] == {"bytes": 1024, "avg_latency_us": 55.48, "min_latency_us": 24.05,
                                       "max_latency_us": 134.61, "iterations": 1000}
    old = parse_text(log("osu/libfabric_cray_pr859_latency_v5.0.log"))
    assert (old.extra["device_buffers"], old.extra["datatype"]) == (None, None)  # v5.0 prints neither


def test_osu_log_with_two_tests_gives_two_results():
    runs = parse_all(log("osu/mpich7448_allreduce_ze_two_runs_v5.6.2.log"))
    assert [(r.extra["benchmark"], r.value, r.extra["device_buffers"]) for r in runs] == [
        ("osu_allreduce", 17.74, "ze"), ("osu_allreduce", 61.02, "ze")]
    with pytest.raises(ParseError, match="the log holds 2 results"):
        parse_text(log("osu/mpich7448_allreduce_ze_two_runs_v5.6.2.log"))


def test_osu_header_without_rows_is_an_error():
    cut = "\n".join(log("osu/ucx4274_bw_v5.6.2.log").splitlines()[:2])
    with pytest.raises(ParseError, match=r"^OSU Bandwidth Test v5\.6\.2: a header but no result rows"):
        parse_all(cut)


# (file, job, value GB/s, directions, iops)
FIO = [
    ("fio/kubestr_randread_randwrite_fio-3.20.json", 0, "read_iops", 0.004039322, ["read"], 982.05078),
    ("fio/kubestr_randread_randwrite_fio-3.20.json", 1, "write_iops", 0.001616406, ["write"], 390.525218),
    ("fio/virtualclient_randwrite_fio-3.26.json", 0, "fio_randwrite_1GB_4k_d1_th1_direct", 0.00887698, ["write"],
     2167.231601),
    ("fio/virtualclient_readwrite_2files_fio-3.26.json", 0, "disk_fill", (149343283 + 67267937) / 1e9,
     ["read", "write"], 569.699415 + 256.606819),
]


@pytest.mark.parametrize("name,index,job,value,directions,iops", FIO)
def test_fio(name, index, job, value, directions, iops):
    res = parse_all(log(name))[index]
    assert (res.kind, res.metric, res.unit, res.problems) == ("fio", "bandwidth", "GB/s", ())
    assert res.value == pytest.approx(value, rel=1e-12)
    assert (res.extra["jobname"], list(res.extra["directions"])) == (job, directions)
    assert res.extra["iops"] == pytest.approx(iops, rel=1e-12)
    assert res.extra["cache"] == "O_DIRECT (page cache bypassed)"
    assert res.extra["value_is"] == "bandwidth of job %s, %s (bw_bytes / 1e9)" % (job, " + ".join(directions))


def test_fio_details_and_what_is_not_fio():
    write = parse_text(log("fio/virtualclient_randwrite_fio-3.26.json")).extra
    assert (write["fio_version"], write["rw"], write["bs"], write["ioengine"]) == ("fio-3.26", "randwrite", "4k",
                                                                                   "windowsaio")
    assert write["directions"]["write"] == {"bytes": 1073741824, "bw_bytes_per_s": 8876980.0, "iops": 2167.231601,
                                            "clat_mean_us": pytest.approx(418.473267365)}
    assert len(parse_all(log("fio/kubestr_randread_randwrite_fio-3.20.json"))) == 2
    # fio prints notes before its JSON; the object is found after them, and nothing else reads as fio
    noted = "note: both iodepth >= 1 and synchronous I/O engine are selected, queue depth will be capped at 1\n" \
        + log("fio/virtualclient_randwrite_fio-3.26.json")
    assert parse_text(noted).value == pytest.approx(0.00887698)
    with pytest.raises(ParseError, match="no fio result found"):
        parse_all('{"jobs": []}', "fio")
    with pytest.raises(ParseError, match=r"^fio JSON output: malformed JSON"):
        parse_all(log("fio/virtualclient_randwrite_fio-3.26.json")[:2000], "fio")
