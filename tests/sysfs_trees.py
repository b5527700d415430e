"""Fake /sys and /dev trees for fabric detection: InfiniBand, Omni-Path, RoCE with a GID table, TCP only."""
from __future__ import annotations

from pathlib import Path

IPV4_GID = "0000:0000:0000:0000:0000:ffff:0a00:0005"   # ::ffff:10.0.0.5
LINK_LOCAL_GID = "fe80:0000:0000:0000:0a00:05ff:fe00:0005"
GLOBAL_V6_GID = "2001:0db8:0000:0000:0a00:05ff:fe00:0005"
ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def add_netdev(root: Path, name: str, *, if_type: str = "1", state: str = "up", physical: bool = True) -> None:
    base = root / "sys" / "class" / "net" / name
    _write(base / "type", if_type)
    _write(base / "operstate", state)
    _write(base / "mtu", "1500")
    _write(base / "address", "02:00:00:00:00:01")
    if physical:
        (base / "device").mkdir(parents=True, exist_ok=True)


def add_rdma_port(root: Path, dev: str, port: int, *, link_layer: str, state: str = "4: ACTIVE",
                  rate: str = "100 Gb/sec (4X EDR)", gids: list[tuple[str, str, str]] | None = None,
                  netdev: str | None = None) -> Path:
    """gids: (gid, type, ndev) per index, e.g. ("fe80:...", "IB/RoCE v1", "eth2")."""
    base = root / "sys" / "class" / "infiniband" / dev
    port_dir = base / "ports" / str(port)
    _write(port_dir / "link_layer", link_layer)
    _write(port_dir / "state", state)
    _write(port_dir / "rate", rate)
    _write(base / "board_id", "MT_0000000001")
    _write(base / "fw_ver", "16.35.1012")
    for index, (gid, gid_type, ndev) in enumerate(gids or []):
        _write(port_dir / "gids" / str(index), gid)
        if gid_type:
            _write(port_dir / "gid_attrs" / "types" / str(index), gid_type)
        _write(port_dir / "gid_attrs" / "ndevs" / str(index), ndev)
    if netdev:
        (base / "device" / "net" / netdev).mkdir(parents=True, exist_ok=True)
    return port_dir


def add_uverbs(root: Path, count: int = 1) -> None:
    for index in range(count):
        _write(root / "dev" / "infiniband" / f"uverbs{index}", "")
    _write(root / "dev" / "infiniband" / "rdma_cm", "")


def tcp_only(root: Path) -> Path:
    add_netdev(root, "lo", if_type="772", state="unknown", physical=False)
    add_netdev(root, "docker0", physical=False)
    add_netdev(root, "veth12ab", physical=False)
    add_netdev(root, "eth0")
    return root


def infiniband(root: Path) -> Path:
    tcp_only(root)
    add_netdev(root, "ib0", if_type="32")
    add_rdma_port(root, "mlx5_0", 1, link_layer="InfiniBand", gids=[(LINK_LOCAL_GID, "", "")])
    add_rdma_port(root, "mlx5_1", 1, link_layer="InfiniBand", state="1: DOWN")
    add_uverbs(root, 2)
    return root


def omnipath(root: Path) -> Path:
    tcp_only(root)
    add_netdev(root, "ib0", if_type="32")
    add_rdma_port(root, "hfi1_0", 1, link_layer="InfiniBand", rate="100 Gb/sec (4X EDR)")
    _write(root / "dev" / "hfi1_0", "")
    add_uverbs(root, 1)
    return root


def roce(root: Path) -> Path:
    """ConnectX in Ethernet mode: index 0/1 link-local (v1/v2), 2 IPv6 global v1, 3 IPv4 v1, 4 IPv6 global
    v2, 5 IPv4 v2 (the one to pick), 6 empty."""
    tcp_only(root)
    add_netdev(root, "eth2")
    add_rdma_port(root, "mlx5_0", 1, link_layer="Ethernet", rate="25 Gb/sec (1X EDR)", netdev="eth2", gids=[
        (LINK_LOCAL_GID, "IB/RoCE v1", "eth2"),
        (LINK_LOCAL_GID, "RoCE v2", "eth2"),
        (GLOBAL_V6_GID, "IB/RoCE v1", "eth2"),
        (IPV4_GID, "IB/RoCE v1", "eth2"),
        (GLOBAL_V6_GID, "RoCE v2", "eth2"),
        (IPV4_GID, "RoCE v2", "eth2"),
        (ZERO_GID, "", ""),
    ])
    add_uverbs(root, 1)
    return root


def roce_ipv6_only(root: Path) -> Path:
    tcp_only(root)
    add_rdma_port(root, "mlx5_0", 1, link_layer="Ethernet", gids=[
        (LINK_LOCAL_GID, "RoCE v2", "eth2"), (GLOBAL_V6_GID, "IB/RoCE v1", "eth2"),
        (GLOBAL_V6_GID, "RoCE v2", "eth2")])
    return root
