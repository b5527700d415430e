"""The node model (dlrun.nodemodel): a profile's node and this node's, the CUDA table against NVIDIA's published
numbers, the GPUDirect level a path allows, and `dlrun doctor`'s rules against the live node."""
from __future__ import annotations

import pytest

from dlrun.catalog import load_catalog
from dlrun.nodemodel import live_node_model, node_model
from dlrun.nodemodel import cuda
from dlrun.nodemodel.gpudirect import nccl_gpudirect
from dlrun.plan import resolve_plan
from dlrun.preflight.node_rules import live_model_finding, live_rule_findings
from dlrun.probe.gpu import parse_capabilities
from dlrun.probe.host import probe_host


@pytest.fixture(scope="module")
def systems():
    return load_catalog(host=probe_host()).systems


def test_txgaia_node_from_its_profile(systems):
    node = node_model(systems["txgaia"])
    assert (node.sockets, node.cores, node.numa_nodes, node.cores_of_numa(1), node.socket_of_numa(1)) == (2, 40, 2, 20, 1)
    assert node.gpu_numa == (1, 1) and node.compute_capability == "7.0"
    assert node.nic_numa("opa") == (0,) and node.nic_numa("roce") == (1,)
    assert (node.gpu_nic_path("opa", 0), node.gpu_nic_path("roce", 1)) == ("SYS", "PHB")
    assert node.nics["opa"].gpudirect is True and node.nics["opa"].rdma


def test_profiles_without_placement_say_unknown(systems):
    b200 = node_model(systems["dgx-b200"])
    assert b200.gpu_numa == (None,) * 8 and not b200.gpu_numa_known()
    assert b200.gpu_nic_path("ib", 0) is None and b200.compute_capability == "10.0"


# NVIDIA's CUDA Toolkit release notes, Table 3 (Linux x86_64), and the architectures each nvcc targets.
@pytest.mark.parametrize("version,capability,targets", [
    ("9.0", "7.0", True), ("9.0", "7.5", False), ("10.0.130", "7.5", True), ("10.0.130", "9.0", False),
    ("10.1.168", "6.0", True), ("12.6.3", "9.0", True), ("12.6.3", "10.0", False), ("12.8.0", "10.0", True),
    ("12.6.3", "3.5", False), ("11.8", "9.0", True),
])
def test_cuda_targets(version, capability, targets):
    assert cuda.targets(version, capability) is targets


def test_cuda_minimum_drivers_and_forward_compatibility():
    assert cuda.release_of("10.0.130").min_driver == "410.48"
    assert cuda.release_of("12.6.3").min_driver == "560.35.05" and cuda.release_of("12.6.1").min_driver == "560.28.03"
    assert cuda.release_of("12.8.0").min_driver == "570.26" and cuda.release_of("7.5") is None
    compat = ["470.57", "525.85", "535.86", "545.23", "550.54"]
    assert cuda.driver_ok("12.6.3", "560.35.05", [], True)[0] is True
    assert cuda.driver_ok("12.6.3", "535.129.03", compat, True)[0] is True  # Eos (DGX H100), NGC's compat package
    assert cuda.driver_ok("12.6.3", "535.54.03", compat, True)[0] is False  # below R535's 535.86
    assert cuda.driver_ok("12.6.3", "555.42.02", compat, True)[0] is False  # R555 is not forward compatible
    assert cuda.driver_ok("10.0.130", "384.111", ["384"], True)[0] is True
    assert cuda.driver_ok("10.0.130", "384.111", ["384"], False)[0] is False  # GeForce: no forward compatibility
    assert cuda.first_release_for("9.0").version == "11.8" and cuda.first_release_for("10.0").version == "12.8"
    assert not cuda.is_datacenter("NVIDIA GeForce RTX 2080 Ti") and cuda.is_datacenter("NVIDIA H100 80GB SXM5")


def test_gpudirect_levels_from_the_path(systems):
    node = node_model(systems["txgaia"])
    assert nccl_gpudirect(node, "opa", "2.4.7-1").env == {"NCCL_NET_GDR_LEVEL": "5"}
    assert nccl_gpudirect(node, "roce", "2.4.7-1").env == {"NCCL_NET_GDR_LEVEL": "3"}
    assert nccl_gpudirect(node, "roce", "2.3.7").env == {"NCCL_IB_GDR_LEVEL": "3"}  # renamed in NCCL 2.4.0
    unknown = nccl_gpudirect(node_model(systems["dgx-b200"]), "ib", "2.23.4")
    assert unknown.env == {} and unknown.level is None


def test_nvidia_smi_compute_capability_rows():
    assert parse_capabilities("0, 9.0\n1, 9.0\n") == {0: "9.0", 1: "9.0"}
    assert parse_capabilities("Field \"compute_cap\" is not a valid field to query.\n") == {}
    assert parse_capabilities(None) == {}


def _inventory(capability="9.0", driver="550.54.15", gpu_numa=(0, 0, 0, 0, 0, 0, 0, 0), nics=None):
    gpus = [{"index": i, "name": "NVIDIA H100 80GB HBM3", "numa_node": n, "compute_cap": capability,
             "driver": driver} for i, n in enumerate(gpu_numa)]
    return {"hostname": "gpu-node-1", "cpu": {"model": "x", "sockets": 2, "physical_cores": 112, "logical_cpus": 224,
                                             "numa": [{"node": 0}, {"node": 1}]},
            "gpu": {"gpus": gpus}, "fabrics": nics or {"usable": ["tcp"], "config": {}, "rdma_devices": []}}


def test_live_node_model_from_an_inventory():
    nics = {"usable": ["ib", "tcp"], "config": {"ib": {"hca": ["mlx5_0:1", "mlx5_1:1"]}},
            "rdma_devices": [{"name": "mlx5_0", "numa_node": 0}, {"name": "mlx5_1", "numa_node": 1}]}
    node = live_node_model(_inventory(nics=nics))
    assert (node.sockets, node.cores_per_socket, node.threads_per_core, node.numa_nodes) == (2, 56, 2, 2)
    assert node.compute_capability == "9.0" and node.driver == "550.54.15" and node.gpus == 8
    assert node.nic_numa("ib") == (0, 1) and node.origin == "this node (gpu-node-1)"
    assert "ib: mlx5_0 NUMA 0, mlx5_1 NUMA 1" in live_model_finding(_inventory(nics=nics)).message


def test_doctor_holds_the_job_to_the_live_node(monkeypatch):
    """The DGX-2 job on a node whose GPUs are Hopper (9.0) on an old driver and all on NUMA node 0: the image's
    CUDA 10.0 cannot target them, the driver is too old, and the profile's binding is off the GPUs' socket."""
    monkeypatch.setenv("DLRUN_HOME", "/nonexistent/dlrun-home")
    plan = resolve_plan(load_catalog(host=probe_host()), "resnet50", system="dgx2")
    inventory = _inventory(capability="9.0", driver="400.10", gpu_numa=(0,) * 16)
    found = {f.check: f.message for f in live_rule_findings(plan, inventory)}
    assert "CUDA 10.0.130" in found["rule cuda-target"] and "compute capability 9.0" in found["rule cuda-target"]
    assert found["rule cuda-target"].startswith("rule cuda-target (this node): ")
    assert "its GPU's NUMA node on gpu-node-1 is 0 (8 of 16 rank(s) off their socket)" in found["rule gpu-socket"]
    same = _inventory(capability="7.0", driver="418.40", gpu_numa=(0,) * 8 + (1,) * 8)
    assert [f.check for f in live_rule_findings(plan, same)] == []


def test_doctor_finds_the_nic_on_another_socket_than_the_profile_says(monkeypatch):
    """TX-GAIA over RoCE asks for GPUDirect through CPU1 (NCCL level 3, PHB): on a node whose ConnectX-4 sits on
    CPU0 the path is SYS, and that level keeps GPUDirect off there, which the paper's runs had."""
    monkeypatch.setenv("DLRUN_HOME", "/nonexistent/dlrun-home")
    plan = resolve_plan(load_catalog(host=probe_host()), "resnet50", system="txgaia", fabric="roce", nodes=2)
    nics = {"usable": ["roce", "tcp"], "config": {"roce": {"hca": ["mlx5_0:1"]}},
            "rdma_devices": [{"name": "mlx5_0", "numa_node": 0}]}
    inventory = _inventory(capability="7.0", driver="418.40", gpu_numa=(1, 1), nics=nics)
    inventory["cpu"] = {"model": "x", "sockets": 2, "physical_cores": 40, "logical_cpus": 40,
                        "numa": [{"node": 0}, {"node": 1}]}
    found = {f.check: f.message for f in live_rule_findings(plan, inventory)}
    assert "GPU<->NIC path is SYS, but NCCL_NET_GDR_LEVEL=3 (PHB) keeps it off there" in found["rule gpudirect"]
    nics["rdma_devices"] = [{"name": "mlx5_0", "numa_node": 1}]
    assert "rule gpudirect" not in {f.check for f in live_rule_findings(plan, inventory)}
