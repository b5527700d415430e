"""Local defaults that give sane numbers: the CPUs a rank can have (affinity, capped by the cgroup's CPU
quota, read from cgroup v1 and v2 files laid out as the kernel does), and the look at how busy the node is
before a local run, with a real busy process of another process tree."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from dlrun.probe.cpu import cpu_quota, usable_cpus
from dlrun.probe.load import node_load
from dlrun.results.quality import busy_warning


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.mark.parametrize("files, quota", [
    ({"proc/self/cgroup": "0::/slurm/job_7\n", "sys/fs/cgroup/slurm/job_7/cpu.max": "150000 100000\n"}, 2),
    ({"proc/self/cgroup": "0::/\n", "sys/fs/cgroup/cpu.max": "max 100000\n"}, None),
    ({"proc/self/cgroup": "4:memory:/x\n2:cpu,cpuacct:/docker/abc\n0::/\n",
      "sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "400000\n",
      "sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n"}, 4),
    ({"proc/self/cgroup": "2:cpu,cpuacct:/\n", "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "-1\n",
      "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n"}, None),
])
def test_the_cgroup_quota_caps_the_cpus_a_rank_can_have(tmp_path, files, quota):
    assert cpu_quota(_tree(tmp_path, files)) == quota


def test_this_process_can_have_its_affinity_at_most():
    assert 1 <= usable_cpus() <= len(os.sched_getaffinity(0))


def test_busy_processes_elsewhere_show_in_the_look_before_a_run():
    """Processes of another process tree keep half the node's CPUs and more busy: the look sees them."""
    busy = "import time\nend = time.time() + 120\nwhile time.time() < end:\n    pass\n"
    pids = []
    try:
        for _ in range(os.cpu_count() // 2 + 1):
            started = subprocess.run(["sh", "-c", f"{sys.executable} -c '{busy}' >/dev/null 2>&1 & echo $!"],
                                     capture_output=True, text=True, check=True)
            pids.append(int(started.stdout))
        load = node_load(1.0)
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
    assert load.cpus == os.cpu_count() and load.load1 is not None
    assert load.others_cpus is not None and load.cpus / 2 <= load.others_cpus <= load.cpus
    said = busy_warning(load.others_cpus, load.cpus, load.load1)
    assert said is not None and said.startswith(f"this node is busy: other processes use {load.others_cpus:.1f} of "
                                                f"its {load.cpus} CPUs")


def test_the_warning_says_how_busy_and_stays_quiet_below_the_threshold():
    assert busy_warning(0.1, 16, 0.5) is None
    assert busy_warning(1.0, 2, 1.62) == ("this node is busy: other processes use 1.0 of its 2 CPUs (50 %; load "
                                          "average 1.62); the run's numbers will be contended")
    assert busy_warning(None, 2, 1.0) is None
