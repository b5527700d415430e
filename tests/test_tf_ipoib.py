"""Parameter-server traffic over the fabric's IP interface (Han et al. ran gRPC over IP over InfiniBand): where
the system profile names the fabric's interface (Summitdev's ib0), each node's wrapper puts that interface's
address into --worker_hosts and --ps_hosts at run time; elsewhere the host lists keep the bare names.

Two "nodes" run side by side on this machine, so they cannot have two ib0 addresses: the mapping test gives
each its address through a stand-in `ip` on PATH; the real `ip` answers for the loopback interface."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from golden_files import GOLDEN, shellcheck_path

from dlrun.plan import resolve_plan
from dlrun.render import render_job
from dlrun.tfcnn_command import CLUSTER_ARG0, IP_HOSTS_SCRIPT, cluster_script

# records each role's argv; a parameter server waits to be stopped, a worker returns once every parameter
# server has started (as a real worker reaches them all before it trains)
RECORDER = """#!{python}
import json, os, sys, time
args = sys.argv[1:]
role = next(a.split("=", 1)[1] for a in args if a.startswith("--job_name="))
task = next(a.split("=", 1)[1] for a in args if a.startswith("--task_index="))
with open(os.path.join(os.environ["RECORD"], "%s.%s.json" % (role, task)), "w") as f:
    json.dump(args, f)
while role == "ps":
    time.sleep(3600)
servers = [h for h in next((a.split("=", 1)[1] for a in args if a.startswith("--ps_hosts=")), "").split(",") if h]
while len([n for n in os.listdir(os.environ["RECORD"]) if n.startswith("ps.")]) < len(servers):
    time.sleep(0.05)
"""
# `ip -4 -o addr show dev IFACE` as iproute2 prints it, with this node's address (NODE_ADDR; none: no line)
IP_STANDIN = """#!/bin/sh
[ -n "$NODE_ADDR" ] && echo "4: $6    inet $NODE_ADDR/16 brd 10.0.255.255 scope global $6\\\\       valid_lft forever"
exit 0
"""
HOSTS = ["--worker_hosts=h1:5000,h2:5000", "--ps_hosts=h1:5001,h1:5002,h2:5001,h2:5002"]


def _env(tmp_path: Path, with_ip: bool) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(RECORDER.format(python=sys.executable))
    if with_ip:
        (bin_dir / "ip").write_text(IP_STANDIN)
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    (tmp_path / "record").mkdir()
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "RECORD": str(tmp_path / "record"),
            "DLRUN_RUN_DIR": str(tmp_path / "run")}


def _argv(script: str) -> list[str]:
    return ["bash", "-c", script, CLUSTER_ARG0, "python3", "tf_cnn_benchmarks.py", "--model=trivial", *HOSTS]


def _records(tmp_path: Path) -> dict[str, list[str]]:
    return {p.stem: json.loads(p.read_text()) for p in (tmp_path / "record").iterdir()}


def _hosts(args: list[str]) -> tuple[str, str]:
    workers = next(a for a in args if a.startswith("--worker_hosts="))
    return workers, next(a for a in args if a.startswith("--ps_hosts="))


def test_each_node_puts_its_own_interface_address_in_the_host_lists(tmp_path):
    env = _env(tmp_path, with_ip=True)
    script = cluster_script(servers=4, per=2, workers=2, iface="ib0")
    nodes = [subprocess.Popen(_argv(script), env={**env, "SLURM_PROCID": str(i), "NODE_ADDR": f"10.0.0.{i + 1}"},
                              stderr=subprocess.PIPE, text=True) for i in (0, 1)]
    results = [(node.wait(timeout=300), node.stderr.read()) for node in nodes]
    assert [rc for rc, _ in results] == [0, 0], results
    assert not any("dlrun:" in err for _, err in results)
    records = _records(tmp_path)
    assert sorted(records) == ["ps.0", "ps.1", "ps.2", "ps.3", "worker.0", "worker.1"]
    expected = ("--worker_hosts=10.0.0.1:5000,10.0.0.2:5000",
                "--ps_hosts=10.0.0.1:5001,10.0.0.1:5002,10.0.0.2:5001,10.0.0.2:5002")
    assert all(_hosts(args) == expected for args in records.values())
    assert records["worker.1"][:2] == ["tf_cnn_benchmarks.py", "--model=trivial"]  # the rest of argv kept


def test_the_real_ip_command_gives_the_loopback_address(tmp_path):
    env = _env(tmp_path, with_ip=False)
    script = cluster_script(servers=0, per=0, workers=1, iface="lo")
    argv = ["bash", "-c", script, CLUSTER_ARG0, "python3", "tf_cnn_benchmarks.py", "--worker_hosts=h1:5000"]
    proc = subprocess.run(argv, env={**env, "SLURM_PROCID": "0"}, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "--worker_hosts=127.0.0.1:5000" in _records(tmp_path)["worker.0"]


def test_a_node_without_an_address_on_the_interface_starts_nothing(tmp_path):
    env = _env(tmp_path, with_ip=True)
    proc = subprocess.run(_argv(cluster_script(servers=4, per=2, workers=2, iface="ib0")),
                          env={**env, "SLURM_PROCID": "0", "NODE_ADDR": ""}, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 1
    assert proc.stderr.startswith("dlrun: no IPv4 address on interface ib0 on ")
    assert not _records(tmp_path)


def test_summitdev_renders_ib0_addresses_and_systems_without_an_interface_bare_names(catalog, monkeypatch):
    monkeypatch.setenv("DLRUN_HOME", "/nonexistent/dlrun-home")
    summitdev = render_job(resolve_plan(catalog, "resnet50_v1", system="summitdev", nodes=16, ps=4)).script
    assert "iface=ib0; addr=$(ip -4 -o addr show dev" in summitdev
    assert summitdev == (GOLDEN / "scripts" / "tf-summitdev-ps.sh").read_text()
    # the same system on its native InfiniBand fabric names no IP interface there; TX-GAIA names none at all
    native = render_job(resolve_plan(catalog, "resnet50_v1", system="summitdev", nodes=16, ps=4, fabric="ib")).script
    txgaia = render_job(resolve_plan(catalog, "resnet50", system="txgaia", nodes=4, ps=2)).script
    for script in (native, txgaia):
        assert "--ps_hosts=${DLRUN_TF_PS_HOSTS}" in script and "iface=" not in script


def test_the_address_step_is_shellcheck_clean(tmp_path):
    path = tmp_path / "ip-hosts.sh"
    path.write_text("#!/usr/bin/env bash\ni=0; per=1; workers=1; dir=/tmp\n"
                    + IP_HOSTS_SCRIPT.replace("@IFACE@", "ib0") + '\nexec "$@"\n')
    proc = subprocess.run([shellcheck_path(), "--severity=style", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout
