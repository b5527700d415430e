"""Fabrics: settings per fabric (exact), detection from fake /sys and /dev trees, the RoCE v2 GID pick in
Python and in the job-script snippet (same tree, same answer), and NCCL's transport from its INFO log."""
from __future__ import annotations

import subprocess

import pytest
import sysfs_trees as trees

from dlrun.catalog.models import FabricConfig
from dlrun.errors import UsageError
from dlrun.fabrics import NCCL_IFNAME_EXCLUDE, check_nccl_transport, fabric_settings, nccl_transports, roce_gid_shell
from dlrun.probe.fabric_devices import detect_fabrics, pick_roce_gid_index


# ------------------------------------------------------------------------------------------ settings
def test_tcp_settings_exact():
    settings = fabric_settings("tcp")
    assert settings.env == {"NCCL_SOCKET_IFNAME": "^lo,docker,veth,virbr,br-,cni,flannel,cali,tun,tap,ifb",
                            "NCCL_IB_DISABLE": "1"}
    assert settings.mca == {"pml": "ob1", "btl": "^openib", "btl_tcp_if_exclude": "lo,docker0,virbr0"}
    assert settings.devices == [] and settings.setup == [] and not settings.ipc_lock
    named = fabric_settings("tcp", FabricConfig(interfaces=["eth2"]))
    assert named.env == {"NCCL_SOCKET_IFNAME": "eth2", "GLOO_SOCKET_IFNAME": "eth2", "NCCL_IB_DISABLE": "1"}
    assert named.mca == {"pml": "ob1", "btl": "^openib", "btl_tcp_if_include": "eth2"}


def _nccl_picks(ifname: str, interfaces: list[str]) -> list[str]:
    """NCCL_SOCKET_IFNAME as NCCL reads it: `^a,b` excludes interfaces starting with a or b, `a,b` keeps them."""
    exclude = ifname.startswith("^")
    prefixes = ifname.lstrip("^").split(",")
    return [i for i in interfaces if any(i.startswith(p) for p in prefixes) != exclude]


def test_socket_ifname_never_picks_lo_or_docker0():
    interfaces = ["lo", "docker0", "veth3a1f", "virbr0", "br-5c2e", "cni0", "eth0", "ens5f0", "ib0"]
    assert _nccl_picks(fabric_settings("tcp").env["NCCL_SOCKET_IFNAME"], interfaces) == ["eth0", "ens5f0", "ib0"]
    named = fabric_settings("tcp", FabricConfig(interfaces=["ens5f0"])).env["NCCL_SOCKET_IFNAME"]
    assert _nccl_picks(named, interfaces) == ["ens5f0"]


def test_ib_settings_exact():
    settings = fabric_settings("ib", FabricConfig(hca=["mlx5_0:1", "mlx5_1:1"], interfaces=["ib0"]), device="cuda")
    assert settings.env == {
        "NCCL_SOCKET_IFNAME": "ib0", "GLOO_SOCKET_IFNAME": "ib0", "NCCL_IB_DISABLE": "0",
        "NCCL_IB_HCA": "mlx5_0:1,mlx5_1:1", "UCX_NET_DEVICES": "mlx5_0:1,mlx5_1:1",
        "UCX_TLS": "rc,sm,self,cuda_copy,cuda_ipc"}
    assert settings.mca == {"pml": "ucx", "osc": "ucx", "btl": "^openib"}
    assert settings.devices == ["/dev/infiniband"] and settings.ipc_lock
    assert fabric_settings("ib").env["UCX_TLS"] == "rc,sm,self"


def test_opa_settings_exact():
    settings = fabric_settings("opa", FabricConfig(hca=["hfi1_0:1"]), device="cuda")
    assert settings.env == {"NCCL_SOCKET_IFNAME": NCCL_IFNAME_EXCLUDE, "FI_PROVIDER": "psm2",
                            "NCCL_IB_DISABLE": "0", "NCCL_IB_HCA": "hfi1_0:1", "PSM2_CUDA": "1"}
    assert settings.mca == {"pml": "cm", "mtl": "ofi", "mtl_ofi_provider_include": "psm2", "btl": "^openib"}
    assert settings.devices == ["/dev/infiniband", "/dev/hfi1_0"]
    assert fabric_settings("opa").devices == ["/dev/infiniband", "/dev/hfi1_0"]  # default unit
    assert "PSM2_CUDA" not in fabric_settings("opa").env


def test_roce_settings_pinned_and_auto():
    pinned = fabric_settings("roce", FabricConfig(hca=["mlx5_0:1"], interfaces=["eth2"], gid_index=3))
    assert pinned.env["NCCL_IB_GID_INDEX"] == "3" and pinned.env["UCX_IB_GID_INDEX"] == "3"
    assert pinned.env["NCCL_IB_HCA"] == "mlx5_0:1" and pinned.env["NCCL_SOCKET_IFNAME"] == "eth2"
    assert pinned.setup == []
    auto = fabric_settings("roce", FabricConfig(hca=["mlx5_0:1"]))
    assert auto.env["NCCL_IB_GID_INDEX"] == "${DLRUN_ROCE_GID_INDEX}"  # never a hard-coded index
    assert len(auto.setup) == 1 and "gid_attrs/types" in auto.setup[0]


def test_unknown_fabric_is_a_usage_error():
    with pytest.raises(UsageError, match=r"unknown fabric 'infiniband'.*valid: ib, opa, roce, tcp"):
        fabric_settings("infiniband")


def test_bad_device_names_are_rejected_by_the_catalog_model():
    with pytest.raises(ValueError, match="not a device or interface name"):
        FabricConfig(hca=["mlx5_0;reboot"])
    with pytest.raises(ValueError, match="not a device or interface name"):
        FabricConfig(interfaces=["eth0 $(id)"])


# ------------------------------------------------------------------------------------------ detection
def test_detect_tcp_only(tmp_path):
    found = detect_fabrics(trees.tcp_only(tmp_path))
    assert found["usable"] == ["tcp"]
    assert found["config"] == {"tcp": {"interfaces": ["eth0"]}}  # not lo, docker0 or veth
    names = {n["name"]: n for n in found["interfaces"]}
    assert names["lo"]["type"] == "loopback" and names["docker0"]["virtual"] and not names["eth0"]["virtual"]
    assert found["rdma_devices"] == [] and found["uverbs"] == []


def test_detect_infiniband(tmp_path):
    found = detect_fabrics(trees.infiniband(tmp_path))
    assert found["usable"] == ["ib", "tcp"]
    assert found["config"]["ib"] == {"hca": ["mlx5_0:1"], "interfaces": ["ib0"]}  # mlx5_1 is DOWN
    assert found["uverbs"] == ["uverbs0", "uverbs1"]
    assert found["config"]["tcp"] == {"interfaces": ["eth0"]}


def test_detect_omnipath(tmp_path):
    found = detect_fabrics(trees.omnipath(tmp_path))
    assert found["usable"] == ["opa", "tcp"]
    assert found["hfi1_devices"] == ["hfi1_0"]
    assert found["config"]["opa"] == {"hca": ["hfi1_0:1"], "interfaces": ["ib0"]}
    settings = fabric_settings("opa", FabricConfig(**found["config"]["opa"]))
    assert "/dev/hfi1_0" in settings.devices and settings.env["FI_PROVIDER"] == "psm2"


def test_detect_roce_picks_the_ipv4_roce_v2_gid(tmp_path):
    root = trees.roce(tmp_path)
    found = detect_fabrics(root)
    assert found["usable"] == ["roce", "tcp"]
    assert found["config"]["roce"] == {"hca": ["mlx5_0:1"], "interfaces": ["eth2"], "gid_index": 5}
    port = found["rdma_devices"][0]["ports"][0]
    assert port["link_layer"] == "Ethernet" and port["roce_v2_gid_index"] == 5 and port["netdevs"] == ["eth2"]


def test_gid_pick_rules(tmp_path):
    port = trees.roce(tmp_path / "a") / "sys/class/infiniband/mlx5_0/ports/1"
    assert pick_roce_gid_index(port) == 5
    v6 = trees.roce_ipv6_only(tmp_path / "b") / "sys/class/infiniband/mlx5_0/ports/1"
    assert pick_roce_gid_index(v6) == 2  # RoCE v2, routable, not link-local
    assert pick_roce_gid_index(tmp_path / "nothing") is None


@pytest.mark.parametrize("tree,hcas,expected", [
    (trees.roce, ["mlx5_0"], "5"),
    (trees.roce, [], "5"),
    (trees.roce_ipv6_only, [], "2"),
])
def test_gid_shell_snippet_agrees_with_python(tmp_path, tree, hcas, expected):
    root = tree(tmp_path)
    script = "set -euo pipefail\n" + roce_gid_shell(hcas) + '\necho "$DLRUN_ROCE_GID_INDEX"\n'
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "DLRUN_SYSFS_ROOT": str(root)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == expected
    port = root / "sys/class/infiniband/mlx5_0/ports/1"
    assert str(pick_roce_gid_index(port)) == expected


def test_gid_shell_snippet_fails_loudly_without_roce_v2(tmp_path):
    root = trees.infiniband(tmp_path)  # InfiniBand link layer: no RoCE GIDs at all
    out = subprocess.run(["bash", "-c", "set -euo pipefail\n" + roce_gid_shell([]) + "\necho reached"], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "DLRUN_SYSFS_ROOT": str(root)})
    assert out.returncode == 1 and "reached" not in out.stdout
    assert "no RoCE v2 GID on this node" in out.stderr


# ------------------------------------------------------------------------------------------ NCCL transport
NCCL_IB_LOG = """\
node1:2301:2301 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.1<0>
node1:2301:2301 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.0.0.1<0>
node1:2301:2301 [0] NCCL INFO Using network IB
node1:2301:2400 [0] NCCL INFO Channel 00/02 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA
node1:2301:2400 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC
"""
NCCL_SOCKET_LOG = """\
node1:2301:2301 [0] NCCL INFO NET/IB : No device found.
node1:2301:2301 [0] NCCL INFO NET/Socket : Using [0]eth0:10.1.1.1<0>
node1:2301:2301 [0] NCCL INFO Using network Socket
[1,0]<stdout>:node1:2301:2400 [0] NCCL INFO Channel 00/0 : 0[0] -> 2[0] [send] via NET/Socket/0
"""
NCCL_OFI_LOG = """\
node1:11:11 [0] NCCL INFO NET/OFI Selected Provider is psm2
node1:11:11 [0] NCCL INFO Using network AWS Libfabric
node1:11:40 [0] NCCL INFO Channel 00/0 : 0[0] -> 2[0] [send] via NET/AWS Libfabric/0
"""


def test_nccl_transport_parsing():
    assert nccl_transports(NCCL_IB_LOG) == {"networks": ["IB"], "net_channels": ["IB"], "seen": True}
    assert nccl_transports(NCCL_SOCKET_LOG) == {"networks": ["Socket"], "net_channels": ["Socket"], "seen": True}
    assert nccl_transports(NCCL_OFI_LOG)["networks"] == ["AWS Libfabric"]
    assert nccl_transports("no nccl here")["seen"] is False


def test_rdma_fabric_that_used_sockets_fails():
    ok, reason, facts = check_nccl_transport("ib", NCCL_SOCKET_LOG, nodes=2)
    assert not ok and "NET/Socket" in reason and "fabric ib" in reason
    assert check_nccl_transport("roce", NCCL_SOCKET_LOG, nodes=2)[0] is False
    assert check_nccl_transport("opa", NCCL_SOCKET_LOG, nodes=2)[0] is False
    assert check_nccl_transport("ib", NCCL_IB_LOG, nodes=2)[0] is True
    assert check_nccl_transport("opa", NCCL_OFI_LOG, nodes=2)[0] is True
    assert check_nccl_transport("tcp", NCCL_SOCKET_LOG, nodes=2)[0] is True  # sockets are what tcp means
    single = "x NCCL INFO Using network Socket\n"
    assert check_nccl_transport("ib", single, nodes=1)[0] is True  # one node: the network carries nothing
    assert check_nccl_transport("ib", single, nodes=2)[0] is False
