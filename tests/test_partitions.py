"""A system's partitions (dlrun.catalog.partitions): a site with a GPU partition and a CPU partition says so in one
profile; `--partition NAME` plans, renders and checks the job on that partition's nodes; an unknown one is one
line naming the valid ones; the partition is in the comparability key. No seed system's source names partitions,
so the system here is a site's own, written by the test; the GPU partition's nodes are BIH's published med0304
(`scontrol show node`, tests/data/logs/slurm), the CPU partition's are the site's own words."""
from __future__ import annotations

import pytest
from conftest import run_cli

from dlrun.catalog import load_catalog
from dlrun.catalog.loader import CatalogError
from dlrun.errors import UsageError
from dlrun.nodemodel import node_model
from dlrun.plan import resolve_plan
from dlrun.probe.host import probe_host
from dlrun.render import render_job
from dlrun.results.compare import key_diff
from dlrun.results.key import UNKNOWN, key_from_run

SITE = """\
name: bih-like
description: "a site's cluster: a GPU partition (the system's own) and a CPU partition"
nodes: 4
cpu: {model: "Intel Xeon Gold 6130", sockets: 2, cores_per_socket: 16, threads_per_core: 2, numa_nodes: 2}
memory_gb: 376.2
gpus: {model: "Tesla V100", count_per_node: 4, numa_affinity: [0, 0, 1, 1], compute_capability: "7.0"}
fabrics: [ib, tcp]
default_fabric: ib
fabric_config:
  ib: {hca: ["mlx5_0:1"], numa_affinity: [0]}
scheduler: slurm
launcher: srun
scheduler_options: {partition: gpu, account: proj1, qos: normal}
partitions:
  cpu:
    description: "16 CPU nodes"
    nodes: 16
    cpu: {model: "AMD EPYC 7742", sockets: 2, cores_per_socket: 64, numa_nodes: 8}
    memory_gb: 512
    gpus: null
    fabrics: [tcp]
    default_fabric: tcp
    scheduler_options: {qos: long}
"""


def _site(tmp_path, monkeypatch, text: str = SITE):
    (tmp_path / "site" / "systems").mkdir(parents=True)
    (tmp_path / "site" / "systems" / "bih-like.yaml").write_text(text)
    monkeypatch.setenv("DLRUN_PATH", str(tmp_path / "site"))
    return {"DLRUN_PATH": str(tmp_path / "site")}


@pytest.fixture
def site(tmp_path, monkeypatch, dlrun_home):
    env = _site(tmp_path, monkeypatch)
    return load_catalog(host=probe_host()), env


def test_the_cpu_partition_plans_on_its_own_nodes_and_keeps_the_systems_other_facts(site):
    catalog, _ = site
    plan = resolve_plan(catalog, "resnet50", system="bih-like", partition="cpu", nodes=16)
    assert (plan.system.partition, plan.system.nodes, plan.device, plan.system.gpus, plan.fabric) == (
        "cpu", 16, "cpu", None, "tcp")
    options = plan.scheduler_options.model_dump()
    assert (options["partition"], options["qos"], options["account"]) == ("cpu", "long", "proj1")  # merged key-wise
    model = node_model(plan.system)
    assert (model.cores, model.numa_nodes, model.gpu_model) == (128, 8, None)
    assert model.origin == "profile bih-like, partition cpu"
    script = render_job(plan).script
    assert "#SBATCH --partition=cpu" in script and "#SBATCH --qos=long" in script
    assert "--gpus-per-node" not in script and "--cpus-per-task=128" in script


def test_without_partition_the_system_is_its_own_partition_and_its_gpus_are_modelled(site):
    catalog, _ = site
    plans = [resolve_plan(catalog, "resnet50", system="bih-like", nodes=2, **given) for given in ({}, {"partition": "gpu"})]
    for plan in plans:
        assert (plan.system.partition, plan.device, plan.ranks_per_node, plan.system.cpu.cores) == (None, "cuda", 4, 32)
        assert "#SBATCH --partition=gpu" in render_job(plan).script
    with pytest.raises(UsageError, match=r"--nodes 17 exceeds system 'bih-like' partition 'cpu', which has 16 node"):
        resolve_plan(catalog, "resnet50", system="bih-like", partition="cpu", nodes=17)


def test_an_unknown_partition_is_one_line_naming_the_valid_ones(site):
    _, env = site
    proc = run_cli("plan", "resnet50", "--system", "bih-like", "--partition", "cpus", env=env)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "dlrun: error: unknown partition 'cpus' of system 'bih-like'; did you mean 'cpu'? valid: cpu, gpu"]


def test_a_system_without_partitions_passes_any_partition_to_the_scheduler_as_before(catalog):
    plan = resolve_plan(catalog, "resnet50", system="prace-skx8160", partition="anything", nodes=2)
    assert plan.system.partition is None and plan.scheduler_options.partition == "anything"
    assert plan.system == catalog.system("prace-skx8160")


def test_a_partition_the_schema_refuses_is_refused_when_the_system_loads(tmp_path, monkeypatch, dlrun_home):
    _site(tmp_path, monkeypatch, SITE.replace("cores_per_socket: 64", "cores_per_socket: 0"))
    with pytest.raises(CatalogError, match=r"bih-like.yaml:\d+: .*partition cpu: cpu.cores_per_socket: Input should "
                                           r"be greater than 0"):
        load_catalog(host=probe_host())
    _site(tmp_path / "again", monkeypatch, SITE.replace("qos: long", "qos: long, partition: other"))
    with pytest.raises(CatalogError, match=r"partition's name is its key in `partitions`"):
        load_catalog(host=probe_host())


def test_the_partition_is_in_the_key_and_a_key_stored_before_reads_unknown(site):
    catalog, _ = site

    def key(**given):
        plan = resolve_plan(catalog, "resnet50", system="bih-like", nodes=2, **given)
        return key_from_run({"workload": "resnet50", "system": "bih-like", "nodes": 2, "world_size": plan.world_size,
                             "batch_size": plan.batch_size, "precision": plan.precision,
                             "plan": plan.model_dump(mode="json")}, [])

    gpu, cpu = key(), key(partition="cpu")
    assert (gpu["partition"], cpu["partition"]) == ("gpu", "cpu")
    assert "partition: gpu ≠ cpu" in key_diff.differences(gpu, cpu)
    local = key_from_run({"workload": "resnet50", "system": "localhost", "nodes": 1,
                          "plan": resolve_plan(catalog, "resnet50").model_dump(mode="json")}, [])
    assert local["partition"] == "n/a"
    stored_before = {name: value for name, value in gpu.items() if name != "partition"}
    assert stored_before.get("partition", UNKNOWN) == UNKNOWN
    said = [line for line in key_diff.differences(stored_before, gpu) if line.startswith("partition")]
    assert said == ["partition: unknown ≠ gpu (cannot tell whether they match)"]


def test_the_jobs_rules_hold_each_partition_to_its_own_nodes(site):
    from dlrun.jobcheck import check

    catalog, _ = site

    def refused(**given):
        plan = resolve_plan(catalog, "resnet50", system="bih-like", nodes=1, threads=16, **given)
        return [f.rule for f in check(render_job(plan).facts) if not f.assumption]

    assert "cpu-threads" in refused()  # 4 ranks x 16 threads over the GPU nodes' 32 cores
    assert "cpu-threads" not in refused(partition="cpu")  # 1 rank x 16 threads over the CPU nodes' 128 cores


def test_systems_show_gives_each_partition_as_the_site_stated_it(site):
    from conftest import cli_json

    _, env = site
    shown = cli_json("systems", "show", "bih-like", env=env)
    assert shown["partitions"]["cpu"]["gpus"] is None  # stated: no GPUs
    assert set(shown["partitions"]["cpu"]) == {"description", "nodes", "cpu", "memory_gb", "gpus", "fabrics",
                                               "default_fabric", "scheduler_options"}  # nothing left to the system
