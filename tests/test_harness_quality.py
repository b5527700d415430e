"""What the harness records for the quality verdict and the fingerprint (harness_common.py, shared by the
PyTorch and the TensorFlow 2 harness): its own CPU time counts the processes under it (data-loader workers)
and nothing else, rank 0 gathers every rank's figures per host, and a real run's result carries them along
with the node it ran on. Real processes, real /proc, the harness run as a program."""
from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import time

import pytest

from dlrun.paths import HARNESS_DIR
from dlrun.harness import load_harness

common = load_harness("pytorch", "common")
BUSY = "import time\nend = time.time() + {seconds}\nwhile time.time() < end:\n    pass\n"


def _ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def _wait_for_ticks(pid: int, ticks: int, limit_s: float = 60.0) -> None:
    """Wait until `pid` has used `ticks` CPU ticks: on a shared machine it may wait for a CPU."""
    deadline = time.monotonic() + limit_s
    while _ticks(pid) < ticks:
        assert time.monotonic() < deadline, f"process {pid} got no CPU in {limit_s} s"
        time.sleep(0.05)


def test_own_cpu_time_counts_the_processes_under_the_rank():
    before = common.own_cpu_ticks()
    child = subprocess.Popen([sys.executable, "-c", BUSY.format(seconds=30)])
    try:
        assert child.pid in common.descendants(os.getpid())
        _wait_for_ticks(child.pid, 30)
        used = _ticks(child.pid)
        assert common.own_cpu_ticks() - before >= used  # the child's CPU time is the rank's own
    finally:
        child.kill()
        child.wait()


def test_a_process_started_elsewhere_is_not_the_ranks_own():
    # `sh` starts the busy process in the background and exits: it is no descendant of this process
    out = subprocess.run(["sh", "-c", f"{sys.executable} -c '{BUSY.format(seconds=30)}' >/dev/null 2>&1 & echo $!"],
                         capture_output=True, text=True, check=True)
    pid = int(out.stdout)
    try:
        assert pid not in common.descendants(os.getpid())
    finally:
        os.kill(pid, 9)


def test_host_names_travel_as_numbers():
    for name in ("node7.cluster.example.org", "x" * 80, "nœud-ü"):
        packed = common.pack_text(name)
        assert len(packed) == common.HOST_FLOATS and all(v == int(v) < 2 ** 53 for v in packed)
        assert common.unpack_text(packed) == name.encode()[:66].decode("utf-8", "replace")


def _row(window, busy, total, own, host, spread=0.02, steps=100.0, threads=4.0, allowed=4.0, cpus=16.0, whole=0.0):
    fields = [window, busy, total, own, 1.0, 1.5, 2400.0, spread, steps, threads, allowed, cpus, whole]
    return fields + common.pack_text(host)


def test_rank_0_reports_per_host_the_share_other_processes_used():
    rows = [_row(10.0, 60.0, 160.0, 20.0, "n1"), _row(10.0, 62.0, 160.0, 22.0, "n1"),  # two ranks on n1
            _row(10.5, 40.0, 168.0, 39.0, "n2", spread=0.2), _row(10.1, 40.0, 161.6, -1.0, "n3")]
    quality = common.quality_fields(rows)
    assert (quality["window_s"], quality["steps"], quality["step_rate_spread"]) == (10.5, 100, 0.2)
    n1, n2 = quality["hosts"]["n1"], quality["hosts"]["n2"]
    # n1: the node was busy 61 CPU-s of 160 on average, its two ranks used 42: others 19 / 160
    assert n1["ranks"] == [0, 1] and n1["others_share"] == pytest.approx(19 / 160, abs=1e-4)
    assert n2["ranks"] == [2] and n2["others_share"] == pytest.approx(1 / 168, abs=1e-4)
    assert n1["node_cpus"] == 16 and n1["threads_per_rank"] == 4 and n1["measured_over"] == "the timed steps"
    assert quality["hosts"]["n3"]["own_cpu_s"] is None  # a figure a rank could not read stays unknown


def test_a_window_too_short_for_the_ticks_is_judged_over_the_whole_benchmark():
    window = common.TimedWindow()
    time.sleep(0.6)
    window.start()
    short = common.quality_fields([window.stop([0.01, 0.01], 1)])
    assert short["hosts"][platform.node()]["measured_over"].startswith("the whole benchmark")
    window.start()
    time.sleep(common.TimedWindow.MEASURE_S)
    full = common.quality_fields([window.stop([0.25, 0.25], 1)])
    assert full["hosts"][platform.node()]["measured_over"] == "the timed steps"
    assert full["window_s"] >= common.TimedWindow.MEASURE_S


def test_a_real_run_reports_its_window_and_its_node():
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    for key in ("RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "SLURM_PROCID"):
        env.pop(key, None)
    proc = subprocess.run([sys.executable, str(HARNESS_DIR / "harness_pytorch.py"), "--model", "trivial",
                           "--batch-size", "8", "--steps", "12", "--warmup-steps", "1", "--threads", "1"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    [line] = [ln for ln in proc.stdout.splitlines() if ln.startswith("DLRUN_RESULT ")]
    result = json.loads(line[len("DLRUN_RESULT "):])
    quality, node = result["quality"], result["node"]
    assert quality["steps"] == 12 and 0 < quality["window_s"] <= result["wall_time_s"] * 1.01
    host = quality["hosts"][platform.node()]
    assert host["ranks"] == [0] and host["threads_per_rank"] == 1 and host["node_cpus"] == os.cpu_count()
    assert 0 <= host["others_share"] <= 1 and host["own_cpu_s"] >= 0
    with open("/proc/meminfo") as f:
        memory = int(re.search(r"MemTotal:\s+(\d+)", f.read()).group(1))
    assert (node["cpu_model"], node["memory_kib"], node["gpus"]) == (common.cpu_name(), memory, [])
    assert node["hostname"] == platform.node() and node["sockets"] >= 1 and node["physical_cores"] >= 1
    assert {nic["name"] for nic in node["fabrics"]["interfaces"]} == set(os.listdir("/sys/class/net"))
