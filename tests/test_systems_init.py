"""`dlrun systems init`: a site's system profile drafted from Slurm's view of its nodes and from this node's
probes. Slurm's output is read from real published `scontrol show node` and `sinfo` outputs
(tests/data/logs/slurm, sources in tests/data/logs/SOURCES.md), LSF's from published `lshosts` and `bhosts`
tables (tests/data/logs/lsf) and PBS's from a published `pbsnodes` record and its JSON (tests/data/logs/pbs); the whole command runs against the suite's
real two-node Slurm cluster, and what it writes is accepted by `dlrun systems show` and renders a job."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import REPO, cli_json, run_cli

from dlrun.catalog.loader import CatalogError
from dlrun.errors import UsageError
from dlrun.probe.host import HostFacts
from dlrun.schedulers.base import ClusterView
from dlrun.schedulers.lsf_view import LABELS as LSF_LABELS
from dlrun.schedulers.lsf_view import batch_hosts, parse_bhosts, parse_lshosts
from dlrun.schedulers.pbs_view import LABELS as PBS_LABELS
from dlrun.schedulers.pbs_view import parse_pbsnodes, parse_pbsnodes_json
from dlrun.schedulers.slurm_view import gres_gpus, parse_nodes, parse_sinfo
from dlrun.systeminit import NOT_KNOWN, Probed
from dlrun.systeminit.draft import common_tail, from_view
from dlrun.systeminit.text import diff, render, validate

LOGS = REPO / "tests" / "data" / "logs" / "slurm"
BIH_NODE = LOGS / "bih_scontrol_show_node_med0304.txt"
BIH_SINFO = LOGS / "bih_sinfo_n_med0301-0304.txt"
SIENA_SINFO = LOGS / "siena_grawp_sinfo.txt"


def test_a_published_scontrol_show_node_record_is_read_field_by_field():
    [node] = parse_nodes(BIH_NODE.read_text())
    assert (node.name, node.arch, node.cpus, node.sockets, node.cores_per_socket, node.threads_per_core) == (
        "med0304", "x86_64", 64, 2, 16, 2)
    assert (node.memory_mib, node.gpus, node.gpu_type, node.features, node.partitions, node.hostname) == (
        385215, 4, "tesla", ("skylake",), ("gpu",), "med0304")


def test_the_same_record_on_one_line_reads_the_same():
    text = BIH_NODE.read_text()
    one_line = " ".join(line.strip() for line in text.replace("\r\n", "\n").splitlines())
    assert parse_nodes(one_line) == parse_nodes(text)
    assert len(parse_nodes(one_line + "\n" + one_line.replace("med0304", "med0305"))) == 2


def test_published_sinfo_tables_give_partitions_the_default_and_node_counts():
    bih = {p.name: p for p in parse_sinfo(BIH_SINFO.read_text())}
    assert list(bih) == ["debug", "medium", "long", "critical", "highmem", "gpu", "mpi"]
    assert [name for name, p in bih.items() if p.default] == ["debug"]
    assert (bih["gpu"].nodes, bih["gpu"].time_limit, bih["gpu"].available) == (4, "14-00:00:0", "up")
    siena = {p.name: (p.default, p.nodes, p.time_limit) for p in parse_sinfo(SIENA_SINFO.read_text())}
    assert siena == {"short": (True, 24, "4:00:00"), "normal": (False, 24, "infinite"), "high": (False, 4, "infinite")}


@pytest.mark.parametrize("gres, expected", [
    ("gpu:tesla:4(S:0-1)", (4, "tesla")),  # BIH's med0304 (above)
    # `sinfo -O NodeList,Gres` of Sheffield's Bessemer: https://github.com/rcgsheffield/sheffield_hpc/pull/1429
    ("gpu:v100:4(S:0)", (4, "v100")),
    ("(null)", (0, None)),
])
def test_gres_gpus(gres, expected):
    assert gres_gpus(gres) == expected


def _probed(host: str = "login01", gpus: tuple = ()) -> Probed:
    """A login node that is not one of the partition's nodes (its own CPU and no GPU), as the probes see it."""
    facts = HostFacts(hostname=host, arch="x86_64", usable_cpus=8, cpu_model="Intel(R) Xeon(R) Gold 6130 CPU",
                      numa_nodes=2, memory_gb=93.1, gpus=gpus, fabrics={"config": {"tcp": {"interfaces": ["eth0"]}}},
                      python="/usr/bin/python3")
    return Probed(facts, {"sockets": 2, "physical_cores": 32, "logical_cpus": 64})


def _bih_view() -> ClusterView:
    return ClusterView("scontrol show node, sinfo", tuple(parse_nodes(BIH_NODE.read_text())),
                       tuple(parse_sinfo(BIH_SINFO.read_text())), "20.02.0")


def _drafted(tmp_path: Path, partition: str | None, probed: Probed | None = None):
    entries = from_view("bih-gpu", probed or _probed(), _bih_view(), "slurm", ("srun",), partition)
    entries += common_tail(["apptainer", "host"])
    text = render(entries, "scontrol show node, sinfo", "login01", "2026-12-02")
    return entries, text, validate(text, tmp_path / "bih-gpu.yaml")


def test_a_profile_of_the_published_gpu_partition_says_where_every_value_comes_from(tmp_path):
    entries, text, spec = _drafted(tmp_path, "gpu")
    assert (spec.nodes, spec.cpu.sockets, spec.cpu.cores_per_socket, spec.cpu.threads_per_core) == (1, 2, 16, 2)
    assert (spec.memory_gb, spec.gpus.count_per_node, spec.gpus.model, spec.scheduler, spec.launcher) == (
        376.2, 4, "tesla", "slurm", "srun")
    assert spec.scheduler_options.partition == "gpu"
    lines = text.splitlines()
    assert '  sockets: 2  # scontrol show node (med0304): Sockets' in lines
    assert 'memory_gb: 376.2  # scontrol show node (med0304): RealMemory 385215 MiB / 1024' in lines
    assert any(line.startswith('  model: "tesla"  # scontrol show node (med0304): Gres: the GRES type') for line in lines)
    # the login node is no node of the partition: its probes say so
    assert any(line.startswith('  model: "Intel(R) Xeon(R) Gold 6130 CPU"  # probed on login01 (not a node')
               for line in lines)
    assert '  # account: not known: set it' in lines
    assert any(line.startswith("  # constraint: not known: set it, if the jobs need one of the features skylake")
               for line in lines)
    # every value line carries a source; every entry is a value or a commented line to set
    values = [line for line in lines if re.match(r"^\s*[a-z_]+: ", line) and not line.startswith("sources")]
    assert values and all("  # " in line for line in values)
    assert all(entry.source for entry in entries)
    sources = [line for line in lines if line.startswith("  - {")]
    assert json.loads(sources[0][4:])["where"] == "scontrol show node, sinfo on login01, 2026-12-02"


def test_the_default_partition_without_nodes_and_an_unknown_one_are_refused(tmp_path):
    with pytest.raises(UsageError, match=r"partition 'debug' has no node .*valid: a partition with nodes: gpu"):
        _drafted(tmp_path, None)  # debug* is the default, and scontrol showed only med0304 (gpu)
    with pytest.raises(UsageError, match=r"unknown partition 'gpus'; did you mean 'gpu'\?"):
        _drafted(tmp_path, "gpus")


def test_a_draft_the_schema_refuses_is_never_written(tmp_path):
    _, text, _ = _drafted(tmp_path, "gpu")
    with pytest.raises(CatalogError, match=r"bih-gpu.yaml:\d+: nodes: Input should be greater than 0"):
        validate(text.replace("nodes: 1 ", "nodes: 0 "), tmp_path / "bih-gpu.yaml")
    assert "-nodes: 1" in diff(text, text.replace("nodes: 1 ", "nodes: 2 "), tmp_path / "bih-gpu.yaml")
    assert NOT_KNOWN in text


@pytest.mark.slurm
def test_init_against_the_test_cluster_writes_a_profile_that_show_and_a_dry_run_accept(slurm_cluster, dlrun_home):
    env = slurm_cluster.env
    proc = run_cli("systems", "init", "testsite", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    path = dlrun_home.parent / "xdg-config" / "dlrun" / "systems" / "testsite.yaml"
    assert proc.stdout.startswith(f"wrote {path}: system testsite, 2 node(s), scheduler slurm")
    text = path.read_text()
    assert 'nodes: 2  # scontrol show node, sinfo: the nodes of partition debug like n1' in text
    assert 'partition: "debug"  # scontrol show node, sinfo (the default)' in text
    assert 'memory_gb: 3.9  # scontrol show node (n1): RealMemory 4000 MiB / 1024' in text
    shown = cli_json("systems", "show", "testsite", env=env)
    assert (shown["nodes"], shown["scheduler"], shown["launcher"], shown["cpu"]["cores_per_socket"]) == (
        2, "slurm", "srun", 1)
    dry = run_cli("run", "trivial", "--system", "testsite", "--nodes", "2", "--dry-run", env=env)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "#SBATCH --partition=debug" in dry.stdout and "#SBATCH --nodes=2" in dry.stdout
    # the cluster's other partition (n2 alone), as its own entry of `partitions`, which --partition selects
    assert "partitions:\n  single:\n" in text
    assert '    nodes: 1  # scontrol show node, sinfo: the nodes of partition single like n2' in text
    assert shown["partitions"]["single"]["nodes"] == 1
    wide = run_cli("run", "trivial", "--system", "testsite", "--partition", "single", "--nodes", "2", "--dry-run",
                   env=env)
    assert wide.returncode == 2 and "exceeds system 'testsite' partition 'single', which has 1 node(s)" in wide.stderr
    ran = run_cli("run", "trivial", "--system", "testsite", "--partition", "single", env=env)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    [listed] = cli_json("results", "list", env=env)
    stored = cli_json("results", "show", listed["id"], env=env)
    assert stored["key"]["partition"] == "single" and stored["plan"]["scheduler_options"]["partition"] == "single"
    assert stored["plan"]["system"]["partition"] == "single"
    # a second init shows what it would change and keeps the site's edits without --force
    path.write_text(text.replace('"00:30:00"', '"01:00:00"'))
    again = run_cli("systems", "init", "testsite", env=env)
    assert again.returncode == 0 and '-  time: "01:00:00"' in again.stdout and '+  time: "00:30:00"' in again.stdout
    assert "not written" in again.stderr and '"01:00:00"' in path.read_text()
    forced = run_cli("systems", "init", "testsite", "--force", env=env)
    assert forced.returncode == 0 and path.read_text() == text


# ---------------------------------------------------------------- LSF and PBS: their published tables and records
LSF = REPO / "tests" / "data" / "logs" / "lsf"
PBS = REPO / "tests" / "data" / "logs" / "pbs"


def test_published_lshosts_tables_give_each_server_hosts_cpus_memory_and_type():
    ibm = parse_lshosts((LSF / "ibmcloud_lshosts_w.txt").read_text())
    assert [(h.name, h.cpus, h.memory_mib, h.arch, h.features) for h in ibm] == [
        (f"lsfuser05-ubuntu-two-mgmt-{i}", 2, 7680, "x86_64", ("mg",)) for i in (1, 2, 3)]
    # a client host (server No, `-` for what it does not say) runs no jobs; no-break spaces separate the columns
    [server] = parse_lshosts((LSF / "ibmcloud_lshosts_client.txt").read_text())
    assert (server.name, server.cpus, server.memory_mib) == ("cluster_prefix-jul10", 8, round(62.3 * 1024))
    volclava = parse_lshosts((LSF / "volclava_lshosts.txt").read_text())
    assert [(h.name, h.cpus, h.memory_mib, h.arch) for h in volclava] == [
        ("master-test", 4, 32012, None), ("cmp1-test", 4, 31993, None), ("cmp2-test", 4, 31993, None)]


def test_bhosts_keeps_the_hosts_that_take_batch_jobs():
    ibm = parse_bhosts((LSF / "ibmcloud_bhosts_w.txt").read_text())
    assert ibm["lsfuser05-ubuntu-two-mgmt-2"] == ("closed_Full", 0)
    assert batch_hosts(parse_lshosts((LSF / "ibmcloud_lshosts_w.txt").read_text()), ibm) == []  # management hosts
    volclava = batch_hosts(parse_lshosts((LSF / "volclava_lshosts.txt").read_text()),
                           parse_bhosts((LSF / "volclava_bhosts.txt").read_text()))
    assert [h.name for h in volclava] == ["master-test", "cmp1-test", "cmp2-test"]


def test_a_profile_from_lsf_takes_its_most_common_hosts_and_marks_what_lsf_does_not_say(tmp_path):
    hosts = batch_hosts(parse_lshosts((LSF / "volclava_lshosts.txt").read_text()),
                        parse_bhosts((LSF / "volclava_bhosts.txt").read_text()))
    view = ClusterView("lshosts -w, bhosts -w", tuple(hosts), (), labels=LSF_LABELS)
    entries = from_view("volc", _probed(), view, "lsf", ("jsrun",), None) + common_tail(["host"])
    text = render(entries, view.source, "login01", "2026-12-02")
    spec = validate(text, tmp_path / "volc.yaml")
    assert (spec.nodes, spec.cpu.cores_per_socket, spec.memory_gb, spec.scheduler) == (2, 4, 31.2, "lsf")
    assert "nodes: 2  # lshosts -w, bhosts -w: the nodes of the cluster like cmp1-test; 1 other node(s)" in text
    assert 'memory_gb: 31.2  # lshosts -w (cmp1-test): maxmem 31993 MiB / 1024' in text
    assert any(line.startswith("  cores_per_socket: 4  # lshosts -w (cmp1-test): ncpus, taken as one socket's cores "
                               f"({NOT_KNOWN}") for line in text.splitlines())
    assert f"  # partition: {NOT_KNOWN}: the queue jobs go to" in text
    with pytest.raises(UsageError, match=r"--partition gpu: `lshosts -w, bhosts -w` names no partition"):
        from_view("volc", _probed(), view, "lsf", ("jsrun",), "gpu")
    no_jobs = ClusterView("lshosts -w, bhosts -w", (), (), labels=LSF_LABELS)
    with pytest.raises(UsageError, match=r"shows no host that takes batch jobs"):
        from_view("ibm", _probed(), no_jobs, "lsf", ("jsrun",), None)


def test_pbsnodes_text_and_json_of_one_published_node_read_the_same():
    [text] = parse_pbsnodes((PBS / "hpcnode03_pbsnodes.txt").read_text())
    [as_json] = parse_pbsnodes_json((PBS / "hpcnode03_pbsnodes_F_json.json").read_text())
    assert text == as_json
    assert (text.name, text.cpus, text.memory_mib, text.gpus, text.partitions) == (
        "hpcnode03", 56, 384000000 // 1024, 0, ("normal",))


def test_a_profile_from_pbs_takes_the_queue_of_its_nodes(tmp_path):
    view = ClusterView("pbsnodes -a -F json", tuple(parse_pbsnodes_json(
        (PBS / "hpcnode03_pbsnodes_F_json.json").read_text())), (), labels=PBS_LABELS)
    entries = from_view("pbs-site", _probed(), view, "pbs", (), None) + common_tail(["host"])
    text = render(entries, view.source, "login01", "2026-12-02")
    spec = validate(text, tmp_path / "pbs-site.yaml")
    assert (spec.nodes, spec.cpu.cores_per_socket, spec.memory_gb, spec.scheduler_options.partition) == (
        1, 56, 366.2, "normal")
    assert 'memory_gb: 366.2  # pbsnodes -a -F json (hpcnode03): resources_available.mem 375000 MiB / 1024' in text
    assert json.loads([line for line in text.splitlines() if line.startswith("  - {")][0][4:])["about"].startswith(
        "description, nodes")


def test_a_published_cluster_of_twelve_partitions_drafts_each_as_its_own_entry(tmp_path):
    """CSC's Puhti as `scontrol show node --all` printed it: the GPU partition is the system's own, each other
    partition an entry stating what differs on its nodes, and the merged partitions are what `--partition` plans on."""
    from dlrun.catalog.partitions import select

    nodes = parse_nodes((LOGS / "puhti_scontrol_show_node_all.txt").read_text())
    assert len(nodes) == 1002 and sum("gpu" in n.partitions for n in nodes) == 78
    view = ClusterView("scontrol show node", tuple(nodes), ())
    entries = from_view("puhti", _probed(), view, "slurm", ("srun",), "gpu") + common_tail(["host"])
    text = render(entries, view.source, "login01", "2026-12-02")
    spec = validate(text, tmp_path / "puhti.yaml")
    assert (spec.nodes, spec.gpus.count_per_node, spec.gpus.model, spec.cpu.cores) == (78, 4, "v100", 40)
    assert sorted(spec.partitions) == ["All", "fmi", "fmitest", "gputest", "hugemem", "hugemem_longrun",
                                       "interactive", "large", "longrun", "small", "test"]
    hugemem, fmi, gputest = (select(spec, name) for name in ("hugemem", "fmi", "gputest"))
    assert (hugemem.nodes, hugemem.memory_gb, hugemem.gpus, hugemem.scheduler_options.partition) == (
        12, 746.1, None, "hugemem")
    assert (fmi.nodes, fmi.cpu.threads_per_core, fmi.cpu.cores) == (238, 2, 40)
    assert (gputest.nodes, gputest.gpus.count_per_node) == (2, 4)  # the same nodes as gpu: only its count differs
    assert "    gpus: null  # scontrol show node (r07c57): Gres: none" in text
    assert "    nodes: 12  # scontrol show node: the nodes of partition hugemem like r07c57; 6 other node(s)" in text
