"""A real three-node Slurm cluster whose nodes are network namespaces: each slurmd (d1, d2, d3) in its own
network, UTS and mount namespace, with its own address on a bridge and its own host name, so that traffic
between two nodes crosses two virtual links, and one node's link can be slowed by a real cause.

Layout: a namespace holding the switch (a bridge, inside its own namespace so that no firewall rule of the
host's forwards or drops its frames), a veth from the host (slurmctld, sbatch, srun: address .254) to the
switch, and one veth from each node's namespace (eth0, address .I) to the switch. Each node's slurmd sees
/etc/hosts listing every node (bind-mounted in its private mount namespace), and a host name that is its
node name, as on a real cluster. `slow_link(node)` puts a token-bucket rate limit (`tc qdisc ... tbf`) on both
ends of that node's link; `tc netem`, the delay the issue names, is not in this kernel (its qdisc is unknown
here), and a rate limit is the same kind of cause: a link that carries less than the others.

Names (namespaces, the host's veth, the subnet) carry this process's id, so that two test sessions on one
machine do not meet. Everything is removed at the end of the session: daemons by their pid files, then the
namespaces (their veths go with them).
"""
from __future__ import annotations

import os
import platform
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from loopback import free_port
from fixtures_slurm import (SLURM_COMMON, SlurmCluster, _require_tools, _start, _wait_for, _which,
                            start_munged, stop_all, system_yaml)

NODES = ("d1", "d2", "d3")
NETNS_SYSTEM = "dlrun-netcluster"

NETNS_CONF = """\
ClusterName=dlrunnet
SlurmctldHost={host}({gateway})
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
""" + SLURM_COMMON + """\
{nodes}
PartitionName=all Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""

def _ip(*argv: str) -> None:
    proc = subprocess.run(["ip", *argv], capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        pytest.fail(f"network-namespace cluster: ip {' '.join(argv)}: {proc.stderr.strip()}")


@dataclass
class NetnsCluster(SlurmCluster):
    tag: str = ""
    subnet: str = ""
    nodes: tuple[str, ...] = NODES
    slowed: set[str] = field(default_factory=set)

    def netns(self, node: str) -> str:
        return f"dl{self.tag}{node}"

    @property
    def switch(self) -> str:
        return f"dl{self.tag}sw"

    def _tc(self, namespace: str, dev: str, *rule: str) -> subprocess.CompletedProcess:
        return subprocess.run(["tc", "-n", namespace, "qdisc", *rule[:1], "dev", dev, "root", *rule[1:]],
                              capture_output=True, text=True, timeout=30)

    def slow_link(self, node: str, rate: str = "100mbit") -> None:
        """Limit both directions of `node`'s link to `rate` (its eth0, and the switch's port to it)."""
        for namespace, dev in ((self.netns(node), "eth0"), (self.switch, f"p{node}")):
            proc = self._tc(namespace, dev, "replace", "tbf", "rate", rate, "burst", "64kb", "latency", "50ms")
            if proc.returncode != 0:
                pytest.fail(f"tc qdisc replace dev {dev} root tbf rate {rate}: {proc.stderr.strip()}")
        self.slowed.add(node)

    def restore_link(self, node: str) -> None:
        for namespace, dev in ((self.netns(node), "eth0"), (self.switch, f"p{node}")):
            self._tc(namespace, dev, "del")
        self.slowed.discard(node)

    def qdisc(self, node: str) -> str:
        return subprocess.run(["tc", "-n", self.netns(node), "qdisc", "show", "dev", "eth0"], capture_output=True,
                              text=True).stdout


def _network(tag: str, subnet: str, hosts: Path) -> list[str]:
    """The switch, the host's link to it and the nodes' namespaces; the namespaces made, to remove."""
    switch, made = f"dl{tag}sw", []
    _ip("netns", "add", switch)
    made.append(switch)
    _ip("-n", switch, "link", "add", "br0", "type", "bridge")
    _ip("-n", switch, "link", "set", "br0", "up")
    _ip("link", "add", f"dl{tag}h", "type", "veth", "peer", "name", "uplink", "netns", switch)
    _ip("-n", switch, "link", "set", "uplink", "master", "br0", "up")
    _ip("addr", "add", f"{subnet}.254/24", "dev", f"dl{tag}h")
    _ip("link", "set", f"dl{tag}h", "up")
    for index, node in enumerate(NODES, start=1):
        namespace = f"dl{tag}{node}"
        _ip("netns", "add", namespace)
        made.append(namespace)
        _ip("-n", switch, "link", "add", f"p{node}", "type", "veth", "peer", "name", "eth0", "netns", namespace)
        _ip("-n", switch, "link", "set", f"p{node}", "master", "br0", "up")
        _ip("-n", namespace, "addr", "add", f"{subnet}.{index}/24", "dev", "eth0")
        _ip("-n", namespace, "link", "set", "eth0", "up")
        _ip("-n", namespace, "link", "set", "lo", "up")
    hosts.write_text("127.0.0.1 localhost\n" + "".join(f"{subnet}.{i} {node}\n" for i, node in enumerate(NODES, 1))
                     + f"{subnet}.254 {platform.node()}\n")
    return made


def _remove(namespaces: list[str], tag: str) -> None:
    subprocess.run(["ip", "link", "del", f"dl{tag}h"], capture_output=True)
    for namespace in reversed(namespaces):
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True)


def _slurmd(node: str, namespace: str, hosts: Path, env: dict[str, str]) -> None:
    # `ip netns exec` remounts /sys, where slurmd then finds no cgroup file system: nsenter joins the network
    # namespace only, and unshare gives slurmd its own host name and /etc/hosts (a private mount namespace).
    # At nice -10 (its jobs inherit it): a node's CPU is the node's, as on a cluster, not shared evenly with the
    # test suite's other worker, whose load would otherwise make one clean pair several times slower than another.
    script = 'mount --bind "$1" /etc/hosts && hostname "$2" && exec "$3" -N "$2"'
    _start(["nice", "-n", "-10", "nsenter", f"--net=/run/netns/{namespace}", "unshare", "--mount", "--uts", "--propagation", "private",
            "sh", "-c", script, "slurmd", str(hosts), node, _which("slurmd")], env, f"slurmd {node}")


@pytest.fixture(scope="session")
def netns_cluster(tmp_path_factory) -> NetnsCluster:
    _require_tools()
    for tool in ("ip", "tc", "nsenter", "unshare"):
        if not _which(tool):
            pytest.fail(f"the network-namespace cluster needs {tool} (Debian: iproute2, util-linux)")
    root = Path(tmp_path_factory.mktemp("netns-slurm"))
    for sub in ("state", "log", "spool", "catalog/systems", *(f"tmp/{node}" for node in NODES)):
        (root / sub).mkdir(parents=True, exist_ok=True)
    # 198.18.0.0/15 is set aside for benchmarking networks (RFC 2544): no site routes it
    tag, subnet = f"{os.getpid() % 100000:05d}", f"198.{18 + os.getpid() % 2}.{os.getpid() % 250 + 1}"
    env = {"SLURM_CONF": str(root / "slurm.conf"), "DLRUN_PATH": str(root / "catalog")}
    full_env = {**os.environ, **env}
    started: list[Path] = []
    namespaces: list[str] = []
    munge_dir = None
    try:
        namespaces = _network(tag, subnet, root / "hosts")
        munge_dir, socket_path = start_munged(started, full_env)
        nodes = "\n".join(f"NodeName={node} NodeHostname={node} NodeAddr={subnet}.{i} CPUs=1 RealMemory=4000 "
                          "State=UNKNOWN" for i, node in enumerate(NODES, 1))
        (root / "slurm.conf").write_text(NETNS_CONF.format(
            host=platform.node(), gateway=f"{subnet}.254", ctld_port=free_port(), slurmd_port=free_port(),
            munge_socket=socket_path, root=root, nodes=nodes))
        _start([_which("slurmctld"), "-i"], full_env, "slurmctld")
        started.append(root / "slurmctld.pid")
        for node in NODES:
            _slurmd(node, f"dl{tag}{node}", root / "hosts", full_env)
            started.append(root / f"slurmd-{node}.pid")

        def idle() -> bool:
            out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True, env=full_env)
            states = dict(line.split() for line in out.stdout.splitlines() if line.strip())
            return all(states.get(node) == "idle" for node in NODES)

        _wait_for(idle, 60, "three idle slurmd", root / "log" / "slurmctld.log")
        (root / "catalog" / "systems" / "netcluster.yaml").write_text(
            system_yaml(NETNS_SYSTEM, "Three slurmd in network namespaces (d1, d2, d3), each its own address on a "
                        "bridge, started by the test suite", 3, "all", "fixtures_netns.py"))
        yield NetnsCluster(root=root, conf=root / "slurm.conf", catalog=root / "catalog", env=env,
                           pid_files=started, tag=tag, subnet=subnet)
    finally:
        if (root / "slurmctld.pid").exists():
            subprocess.run(["scancel", "--full", "--partition=all"], env=full_env, capture_output=True)
            time.sleep(1)
        stop_all(started)
        _remove(namespaces, tag)
        if munge_dir is not None:
            shutil.rmtree(munge_dir, ignore_errors=True)
