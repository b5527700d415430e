"""Topology parsers on real published outputs (tests/data/telemetry/SOURCES.md): `nvidia-smi topo -m` of a DGX
A100, a DGX-1, two IBM AC922 POWER9 systems with NVLink to the CPU and PCIe servers; sysfs link files; ibstatus
ports. Then what they mean: the fingerprint summary (it changes when a link width changes), doctor's warnings
and the bus bandwidth a collective can expect."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest

from dlrun.probe.telemetry_gpu import collect_links
from dlrun.probe.topology import (expected_busbw, gpu_nic_pairs, ib_rate_gbps, node_topology, nvlinks_between_gpus,
                                  parse_ibstatus, parse_topo_matrix, pcie_generation, pcie_link, topology_problems,
                                  topology_summary)

DATA = Path(__file__).parent / "data" / "telemetry"


def _topo(name: str) -> dict:
    return parse_topo_matrix((DATA / "topo" / name).read_text())


def test_dgx_a100_all_pairs_nv12_and_each_gpu_pairs_with_a_nic_behind_its_switch():
    matrix = _topo("dgx-a100_gengwg.txt")
    assert [d for d in matrix["devices"] if d.startswith("GPU")] == [f"GPU{i}" for i in range(8)]
    assert len([d for d in matrix["devices"] if d.startswith("mlx5")]) == 12
    assert nvlinks_between_gpus(matrix) == [12] * 28
    assert gpu_nic_pairs(matrix)["GPU0"] == ("mlx5_0", "PXB") and gpu_nic_pairs(matrix)["GPU7"] == ("mlx5_8", "PXB")
    assert matrix["cpu_affinity"]["GPU4"] == "112-127,240-255" and matrix["numa_affinity"]["GPU4"] == "7"


def test_dgx1_pcie_view_has_no_nvlink_and_gpus_share_a_switch_with_their_nic():
    matrix = _topo("dgx1_topo-mp_gengwg.txt")
    assert nvlinks_between_gpus(matrix) == [0] * 28
    assert gpu_nic_pairs(matrix)["GPU2"] == ("mlx5_1", "PIX") and matrix["numa_affinity"]["GPU7"] == "1"


@pytest.mark.parametrize("name, gpus, pairs", [("ac922-traverse_jdh4.txt", 4, [0, 0, 0, 0, 3, 3]),
                                               ("summit-power9_ucxpy616.txt", 6, [0] * 9 + [2] * 6)])
def test_power9_nodes_with_nvlink_to_the_cpu(name, gpus, pairs):
    """AC922 nodes: GPU pairs on one socket over NVLink, the sockets apart (SYS); Summit's published header runs
    `mlx5_2mlx5_3` together, the rows still name every device."""
    matrix = _topo(name)
    assert len([d for d in matrix["devices"] if d.startswith("GPU")]) == gpus
    assert nvlinks_between_gpus(matrix) == pairs
    assert gpu_nic_pairs(matrix)["GPU0"][1] == "NODE"
    assert [d for d in matrix["devices"] if d.startswith("mlx")] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]


def test_pcie_servers_and_a_gpu_whose_nic_is_on_the_other_socket():
    rtx = _topo("rtx4090-pcie_gpuallocator17.txt")
    assert nvlinks_between_gpus(rtx) == [0] * 28
    assert gpu_nic_pairs(rtx)["GPU6"] == ("NIC0", "PHB") and gpu_nic_pairs(rtx)["GPU0"][1] == "SYS"
    della = _topo("della-a100-pcie_jdh4.txt")
    assert gpu_nic_pairs(della) == {"GPU0": ("mlx5_0", "NODE"), "GPU1": ("mlx5_1", "NODE")}
    problems = topology_problems({"gpus": {}, "nics": {}, "matrix": rtx})
    assert sum(1 for check, *_ in problems if check == "gpu-nic") == 7  # every GPU but GPU6


def test_ibstatus_ports_active_and_down():
    active = parse_ibstatus((DATA / "ibstatus" / "nccl1866_roce_active.txt").read_text())
    assert [(p["device"], p["state"], p["rate_gbps"], p["link_layer"]) for p in active] == [
        ("mlx5_0", "ACTIVE", 100.0, "Ethernet"), ("mlx5_1", "ACTIVE", 100.0, "Ethernet")]
    down = parse_ibstatus((DATA / "ibstatus" / "nccl1935_down.txt").read_text())
    assert [(p["device"], p["state"], p["phys_state"], p["rate_gbps"]) for p in down] == [
        ("mlx5_11", "DOWN", "DISABLED", 10.0), ("mlx5_2", "DOWN", "DISABLED", 40.0), ("mlx5_3", "DOWN", "DISABLED", 10.0)]
    assert ib_rate_gbps("200 Gb/sec (4X HDR)") == 200.0 and ib_rate_gbps("") is None


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def _sysfs(root: Path, gpu_width: str = "8") -> Path:
    """A node shaped like nokyan/resources#512: an upstream switch port 0000:01:00.0 trained at 16.0 GT/s x8
    of 32.0 GT/s x16, the GPU 0000:03:00.0 below it reporting 32.0 GT/s x16 on its own side; and an ACTIVE and
    a DOWN RDMA port with ibstatus's published values."""
    bridge = root / "sys" / "devices" / "pci0000:00" / "0000:01:00.0"
    gpu = bridge / "0000:03:00.0"
    for folder, current, width, numa in ((bridge, "16.0 GT/s PCIe", gpu_width, "0"), (gpu, "32.0 GT/s PCIe", "16", "0")):
        _write(folder / "current_link_speed", current)
        _write(folder / "current_link_width", width)
        _write(folder / "max_link_speed", "32.0 GT/s PCIe")
        _write(folder / "max_link_width", "16")
        _write(folder / "numa_node", numa)
    _write(gpu / "vendor", "0x10de")
    _write(gpu / "class", "0x030200")
    devices = root / "sys" / "bus" / "pci" / "devices"
    devices.mkdir(parents=True)
    (devices / "0000:03:00.0").symlink_to(gpu)
    for name, state, rate in (("mlx5_0", "4: ACTIVE", "100 Gb/sec (4X EDR)"), ("mlx5_11", "1: DOWN", "10 Gb/sec (4X SDR)")):
        port = root / "sys" / "class" / "infiniband" / name / "ports" / "1"
        _write(port / "state", state)
        _write(port / "phys_state", "5: LinkUp" if "ACTIVE" in state else "3: Disabled")
        _write(port / "rate", rate)
        _write(port / "link_layer", "InfiniBand")
    return root


def test_sysfs_links_take_the_slowest_hop_to_the_root_port(tmp_path):
    topo = node_topology(collect_links(str(_sysfs(tmp_path))), None)
    (link,) = topo["gpus"].values()
    assert (link["gen"], link["width"]) == (5, 16)  # what the GPU says of its own side
    assert (link["trained_gen"], link["trained_width"], link["possible_gen"], link["possible_width"]) == (4, 8, 5, 16)
    assert topo["nics"]["mlx5_11"]["ports"][0]["state"] == "DOWN"
    checks = {check: message for check, message, _ in topology_problems(topo)}
    assert checks["pcie-link"] == "GPU at 0000:03:00.0: PCIe link trained at x8 of x16"
    assert checks["rdma-port"] == "mlx5_11 port 1 is DOWN (physical state DISABLED)"
    assert pcie_generation("8 GT/s") == 3 and pcie_generation("Unknown") is None
    assert pcie_link({})["trained_width"] is None


def test_fingerprint_summary_changes_when_a_link_width_changes(tmp_path):
    narrow = node_topology(collect_links(str(_sysfs(tmp_path / "a", gpu_width="8"))), None)
    wide = node_topology(collect_links(str(_sysfs(tmp_path / "b", gpu_width="16"))), None)
    same = copy.deepcopy(narrow)
    assert topology_summary({"topology": narrow}) == topology_summary({"topology": same})
    assert topology_summary({"topology": narrow}) != topology_summary({"topology": wide})
    assert topology_summary({"topology": wide})["node"]["gpus"][0]["pcie_width"] == 16
    two = topology_summary({"nodes_topology": {"n1": narrow, "n2": wide}})
    assert set(two["per_node"]) == {"n1", "n2"}


def test_expected_bus_bandwidth_of_the_detected_path(tmp_path):
    dgx = {"gpus": {}, "nics": {}, "matrix": _topo("dgx-a100_gengwg.txt")}
    nvlink = expected_busbw(dgx, nodes=1, gpu_name="NVIDIA A100-SXM4-40GB", device="cuda")
    assert (nvlink["value"], nvlink["path"]) == (300.0, "NVLink (A100) x 12 per GPU pair") and "datasheet" in nvlink["source"]
    pcie = expected_busbw(node_topology(collect_links(str(_sysfs(tmp_path))), None), nodes=2, gpu_name="X",
                          device="cuda")
    assert pcie["path"] == "1 RDMA port(s), 100 Gb/s per node" and pcie["value"] == 12.5  # below PCIe Gen5 x8
    assert expected_busbw(dgx, nodes=1, gpu_name=None, device="cpu")["value"] is None


def test_doctor_warns_about_the_links_of_the_node_it_runs_on(tmp_path, monkeypatch, dlrun_home):
    """doctor's report of a node shaped like the sysfs tree above (probed from that tree): a link trained narrower
    than it can be and an RDMA port that is DOWN are warnings with a fix; the node's own topology is in the
    inventory."""
    from dlrun.cli.options import load_catalog
    from dlrun.preflight import inventory as preflight_inventory
    from dlrun.probe.topology import probe_topology

    real = preflight_inventory.node_inventory
    fake = probe_topology(_sysfs(tmp_path), with_nvidia_smi=False)
    monkeypatch.setattr(preflight_inventory, "node_inventory",
                        lambda gpu_topology=False: {**real(gpu_topology), "topology": fake})
    report = preflight_inventory.doctor_report(load_catalog())
    warnings = {c["check"]: c for c in report["checks"] if c["level"] == "warn"}
    assert warnings["pcie-link"]["message"] == "GPU at 0000:03:00.0: PCIe link trained at x8 of x16"
    assert warnings["rdma-port"]["fix"].startswith("check the cable")
    assert isinstance(real()["topology"]["gpus"], dict)  # every inventory carries the node's links
