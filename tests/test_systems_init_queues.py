"""`dlrun systems init` on LSF's queues and PBS's queues and GPUs, read from outputs their users published
(tests/data/logs/lsf and pbs, sources in tests/data/logs/SOURCES.md): CERN's LSF 7 batch cluster as its
`bqueues -l`, `bmgroup -r`, `lshosts -w` and `bhosts` printed it (sixty queues over host groups), IBM's `bqueues -l`
example, ALCF Polaris' `pbsnodes` record of a four-GPU node, KISTI GSDC's Torque `pbsnodes -a` (GPU nodes with
their GPUs' names) and `qstat -Qf`, and a PBS Professional site's `pbsnodes -a`, `qstat -Qf` and `qstat -Bf`.
Neither scheduler runs here: the commands dlrun asks are checked exactly, answered with the published outputs.
Hostile output is the published output with a name, a description or its size made hostile."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import REPO

from dlrun.catalog.partitions import select
from dlrun.probe.host import HostFacts
from dlrun.registry import SCHEDULERS
from dlrun.schedulers import base, lsf_view, pbs_view
from dlrun.schedulers.base import ClusterView
from dlrun.schedulers.lsf_view import (batch_hosts, parse_bhosts, parse_bmgroup, parse_bqueues, parse_lshosts,
                                       resolve_hosts, with_queues)
from dlrun.schedulers.pbs_view import (default_queue, labels_of, parse_pbsnodes, parse_qstat_queues)
from dlrun.systeminit import NOT_KNOWN, Probed
from dlrun.systeminit.draft import common_tail, from_view
from dlrun.systeminit.run import draft
from dlrun.systeminit.text import render, validate

LSF = REPO / "tests" / "data" / "logs" / "lsf"
PBS = REPO / "tests" / "data" / "logs" / "pbs"


def _probed() -> Probed:
    facts = HostFacts(hostname="login01", arch="x86_64", usable_cpus=8, cpu_model="Intel(R) Xeon(R) Gold 6130 CPU",
                      numa_nodes=2, memory_gb=93.1, gpus=(), fabrics={"config": {"tcp": {"interfaces": ["eth0"]}}},
                      python="/usr/bin/python3")
    return Probed(facts, {"sockets": 2, "physical_cores": 32, "logical_cpus": 64})


def _cern_hosts():
    return batch_hosts(parse_lshosts((LSF / "cern_lshosts_w.txt").read_text()),
                       parse_bhosts((LSF / "cern_bhosts.txt").read_text()))


def _cern_view() -> ClusterView:
    placed, partitions = with_queues(_cern_hosts(), parse_bqueues((LSF / "cern_bqueues_l.txt").read_text()),
                                     parse_bmgroup((LSF / "cern_bmgroup_r.txt").read_text()), "bmgroup -r")
    return ClusterView("lshosts -w, bhosts -w, bqueues -l, bmgroup -r", tuple(placed), tuple(partitions),
                       labels=lsf_view.LABELS)


def _drafted(tmp_path: Path, view: ClusterView, scheduler: str, partition: str | None):
    entries = from_view("site", _probed(), view, scheduler, (), partition) + common_tail(["host"])
    text = render(entries, view.source, "login01", "2026-12-02")
    return text, validate(text, tmp_path / "site.yaml")


# ------------------------------------------------------------------------------------------------ LSF queues
def test_a_published_bqueues_l_gives_each_queue_its_description_state_limits_and_hosts():
    queues = parse_bqueues((LSF / "cern_bqueues_l.txt").read_text())
    assert len(queues) == 60 and queues[-1].name == "atlas_1nh80"
    grid_ops = queues[0]
    assert (grid_ops.name, grid_ops.description, grid_ops.status) == (
        "grid_ops", "GRID COMPUTING QUEUE; CPU limit: (1 KSI2K week).", "Open:Active")
    assert grid_ops.hosts == ("SHARE/", "IR8NM/", "IR1NH/", "IR8NH/", "IR1ND/")
    assert grid_ops.limits == (("default CPULIMIT", "44.0 min of KSI2K"), ("default RUNLIMIT", "44.0 min of KSI2K"),
                               ("CPULIMIT", "45.0 min of KSI2K"), ("RUNLIMIT", "45.0 min of KSI2K"))
    [normal] = parse_bqueues((LSF / "ibm_bqueues_l_normal.txt").read_text())
    assert (normal.name, normal.hosts, normal.limits) == ("normal", ("all",), ())
    assert normal.description.endswith("lightly loaded. This is the default queue.")


def test_each_queue_holds_the_batch_hosts_its_groups_name_and_says_which_groups_no_tool_resolved():
    view = _cern_view()
    parts = {p.name: p for p in view.partitions}
    assert (parts["cmsinter"].nodes, parts["grid_ops"].nodes, parts["8nm"].nodes) == (5, 1035, 1083)
    assert parts["cmscaf"].time_limit == "RUNLIMIT 30240.0 min of KSI2K" and parts["cmscaf"].source == "bqueues -l"
    assert parts["cmscaf"].limits == (("CPULIMIT", "10080.0 min of KSI2K"),) and parts["cmscaf"].default is None
    # `bmgroup` without -w cuts group names to twelve characters: g_atlascatlong/ is printed g_atlascatlo
    assert parts["atlascatlong"].nodes == 0
    assert parts["atlascatlong"].notes == ("host group g_atlascatlong/ not resolved (bmgroup -r lists no such group)",)
    # and two long names cut to the same g_atlastzero: which is which no tool here says
    assert parts["atlastzero"].notes == ("host group g_atlastzero/ not resolved (bmgroup -r prints two groups of that "
                                         "name)",)
    assert parts["atlas_1nh80"].nodes == 1031 and parts["atlas_1nh80"].notes == parts["atlastzero"].notes
    in_cmsinter = sorted(node.name for node in view.nodes if "cmsinter" in node.partitions)
    assert in_cmsinter == ["lxb8838", "lxb8840", "lxb8850", "lxb8860", "lxb8868"]


def test_hosts_words_all_others_exclusions_preferences_and_other_clusters():
    """CERN's own groups and hosts, in HOSTS lines written the ways lsb.queues allows (`~`, `+N`, `others`,
    `@cluster`), with no group tool answering for the last."""
    hosts = _cern_hosts()
    where = lsf_view._Hosts({h.name: h.name for h in hosts}, parse_bmgroup((LSF / "cern_bmgroup_r.txt").read_text()))
    share, _ = resolve_hosts(("SHARE/",), where)
    assert len(share) == 1023
    assert resolve_hosts(("SHARE/", "~lxb7855"), where)[0] == share - {"lxb7855"}
    assert resolve_hosts(("g_cmsinter/+2", "lxb8455+1"), where)[0] == {
        "lxb8838", "lxb8840", "lxb8850", "lxb8860", "lxb8868", "lxb8455"}
    assert len(resolve_hosts(("lxb8455+2", "others"), where)[0]) == len(hosts)
    assert resolve_hosts(("all", "~SHARE/"), where)[0] == {h.name for h in hosts} - share
    assert resolve_hosts(("hostA@remote", "atlddm09"), where) == (set(), [
        "hostA@remote (another cluster's)", "atlddm09 (not a host that takes batch jobs here)"])
    nothing = lsf_view._Hosts(where.known, None)
    assert resolve_hosts(("SHARE/",), nothing) == (
        set(), ["host group SHARE/ not resolved (no `bmgroup` answered here)"])
    looping = lsf_view._Hosts(where.known, {"a": ("b/",), "b": ("a/", "lxb8455")})
    assert resolve_hosts(("a/",), looping)[0] == {"lxb8455"}


def test_a_profile_of_cern_drafts_every_queue_as_a_partition_with_its_sources(tmp_path):
    view = _cern_view()
    text, spec = _drafted(tmp_path, view, "lsf", None)
    # bqueues -l names no default queue: the system is every batch host, each queue with nodes an entry
    assert spec.nodes == 672 and spec.scheduler_options.partition is None and len(spec.partitions) == 54
    assert f"  # partition: {NOT_KNOWN}: the queue jobs go to" in text
    assert "bmgroup -r names none; its 60 queue(s) are under `partitions`)" in text
    assert ("  # atlascatlong: not listed: host group g_atlascatlong/ not resolved (bmgroup -r lists no such group)"
            in text)
    lines = text.splitlines()
    assert any(line.startswith('    description: "4 node(s) of partition cmsinter: 8 CPUs, no GPU (interactive queue '
                               'dedicated to CMS)"  # lshosts -w, bhosts -w, bqueues -l, bmgroup -r; say what it is; '
                               "bqueues -l: the queue's description") for line in lines)
    assert any(line.startswith("    nodes: 4  # lshosts -w, bhosts -w, bqueues -l, bmgroup -r: the nodes of partition "
                               "cmsinter like") and line.endswith("a job selects it with `bsub -q cmsinter`")
               for line in lines)
    assert (f"    # scheduler_options.time: {NOT_KNOWN} if not the system's; the partition's longest job: "
            "RUNLIMIT 30240.0 min of KSI2K (bqueues -l)") in lines
    assert select(spec, "cmscaf").scheduler_options.partition == "cmscaf"  # what `bsub -q cmscaf` is rendered from
    text, spec = _drafted(tmp_path, view, "lsf", "cmscaf")
    assert (spec.nodes, spec.scheduler_options.partition) == (60, "cmscaf")
    assert ('  partition: "cmscaf"  # lshosts -w, bhosts -w, bqueues -l, bmgroup -r; a job selects it with '
            "`bsub -q cmscaf`") in text
    assert "; its limits (bqueues -l): CPULIMIT 10080.0 min of KSI2K" in text


# ------------------------------------------------------------------------------------------------ the commands asked
def _tools(monkeypatch, answers: dict[str, tuple[int, Path | None]]) -> list[str]:
    """Scheduler commands answered with published outputs (`command line` -> (exit status, file)); any other is
    not installed. Returns the command lines asked, in order."""
    asked: list[str] = []

    def run_tool(argv, **_):
        asked.append(" ".join(argv))
        if asked[-1] not in answers:
            raise base.SchedulerError(f"{argv[0]} not found on PATH; install the scheduler's client tools")
        code, path = answers[asked[-1]]
        return subprocess.CompletedProcess(argv, code, path.read_text() if path else "", "refused" if code else "")

    monkeypatch.setattr(base, "run_tool", run_tool)
    return asked


CERN = {"lshosts -w": (0, LSF / "cern_lshosts_w.txt"), "bhosts -w": (0, LSF / "cern_bhosts.txt"),
        "bqueues -l": (0, LSF / "cern_bqueues_l.txt"), "bmgroup -w -r": (0, LSF / "cern_bmgroup_r.txt")}


def test_systems_init_on_lsf_asks_lshosts_bhosts_bqueues_and_bmgroup(monkeypatch, tmp_path):
    asked = _tools(monkeypatch, CERN)
    drafted = draft("cern", tmp_path / "cern.yaml", scheduler="lsf", probed=_probed())
    assert asked == ["lshosts -w", "bhosts -w", "bqueues -l", "bmgroup -w -r"]
    assert drafted.scheduler == "lsf" and len(drafted.spec.partitions) == 54
    assert "lshosts -w, bhosts -w, bqueues -l, bmgroup -w -r on login01" in drafted.text
    # without bmgroup every group is said unresolved; a refusing bqueues leaves the hosts alone, as before
    _tools(monkeypatch, {**CERN, "bmgroup -w -r": (255, None)})
    view = SCHEDULERS.get("lsf").cluster_view()
    assert view.source == "lshosts -w, bhosts -w, bqueues -l"
    assert {p.notes for p in view.partitions if p.name == "cmsinter"} == {
        ("host group g_cmsinter/ not resolved (no `bmgroup` answered here)",)}
    _tools(monkeypatch, {**CERN, "bqueues -l": (255, None)})
    view = SCHEDULERS.get("lsf").cluster_view()
    assert (view.source, view.partitions, len(view.nodes)) == ("lshosts -w, bhosts -w", (), 1890)


def test_hostile_lsf_output_is_bounded_never_markup_and_a_bad_queue_name_is_left_out(monkeypatch):
    text = (LSF / "cern_bqueues_l.txt").read_text()
    hostile = (text.replace("QUEUE: cmsinter", "QUEUE: cms;rm -rf ~\nHOSTS:  all")
               .replace("  -- GRID COMPUTING QUEUE; CPU limit: (1 KSI2K week).",
                        "  -- \x1b[31mred\x1b[0m \u202eevil\u2028# injected: true\x07", 1))
    queues = parse_bqueues(hostile)
    assert [q.name for q in queues][:3] == ["grid_ops", "atlasinter", "cmscaf"]
    assert queues[0].description == "red evil # injected: true"
    assert len(parse_bqueues(text.replace("HOSTS:  SHARE/", "HOSTS:  " + "x" * 5000 + "/", 1))[0].hosts[0]) == 200
    monkeypatch.setattr(lsf_view, "MAX_OUTPUT_CHARS", text.index("QUEUE: cmscaf"))
    assert [q.name for q in parse_bqueues(text)] == ["grid_ops", "cmsinter", "atlasinter"]


# ------------------------------------------------------------------------------------------------ PBS GPUs and queues
def test_published_pbsnodes_records_give_gpus_and_their_type():
    text = (PBS / "polaris_pbsnodes_x3002c0s7b1n0.txt").read_text()
    [polaris] = parse_pbsnodes(text)
    assert (polaris.name, polaris.cpus, polaris.memory_mib, polaris.gpus, polaris.gpu_type) == (
        "x3002c0s7b1n0", 64, 527672492 // 1024, 4, "A100")
    assert labels_of(text)["gpu_type"] == "resources_available.gputype"
    torque = (PBS / "kisti_torque_pbsnodes_a.txt").read_text()
    nodes = {node.name: node for node in parse_pbsnodes(torque)}
    assert len(nodes) == 22 and sum(node.gpus for node in nodes.values()) == 26
    gpu01, gpu10 = nodes["tem-gpu01-el7.sdfarm.kr"], nodes["tem-gpu10-el7.sdfarm.kr"]
    assert (gpu01.cpus, gpu01.memory_mib, gpu01.gpus, gpu01.gpu_type, gpu01.features) == (
        28, 395990144 // 1024, 2, "Tesla P100-PCIE-16GB", ("gpuQ",))
    assert (gpu10.gpus, gpu10.gpu_type) == (4, "Tesla V100-PCIE-32GB")
    assert nodes["tem-wn1001-el7.sdfarm.kr"].gpus == 0 and nodes["tem-wn1001-el7.sdfarm.kr"].gpu_type is None
    assert labels_of(torque) == pbs_view.TORQUE_LABELS


def test_a_profile_of_the_polaris_node_names_its_gpu_sources(tmp_path):
    text_in = (PBS / "polaris_pbsnodes_x3002c0s7b1n0.txt").read_text()
    view = ClusterView("pbsnodes -a", tuple(parse_pbsnodes(text_in)), (), labels=labels_of(text_in))
    text, spec = _drafted(tmp_path, view, "pbs", None)
    assert (spec.gpus.count_per_node, spec.gpus.model, spec.memory_gb) == (4, "A100", 503.2)
    assert "  count_per_node: 4  # pbsnodes -a (x3002c0s7b1n0): resources_available.ngpus" in text
    assert (f'  model: "A100"  # pbsnodes -a (x3002c0s7b1n0): resources_available.gputype; {NOT_KNOWN} to the '
            "GPU's name") in text


def test_torque_queues_hold_the_nodes_of_their_neednodes_property(tmp_path):
    nodes = parse_pbsnodes((PBS / "kisti_torque_pbsnodes_a.txt").read_text())
    queues = parse_qstat_queues((PBS / "kisti_torque_qstat_Qf.txt").read_text())
    assert [(q.name, q.neednodes, q.enabled, q.started) for q in queues] == [
        ("cpuQ", "cpuQ", True, True), ("gpuQ", "gpuQ", True, True)]
    placed, partitions = pbs_view.with_queues(nodes, queues, None)
    assert [(p.name, p.nodes, p.default, p.notes) for p in partitions] == [
        ("cpuQ", 12, None, ()), ("gpuQ", 10, None, ())]
    view = ClusterView("pbsnodes -a, qstat -Qf", tuple(placed), tuple(partitions), labels=pbs_view.TORQUE_LABELS)
    text, spec = _drafted(tmp_path, view, "pbs", "gpuQ")
    assert (spec.nodes, spec.gpus.count_per_node, spec.gpus.model, spec.memory_gb) == (
        2, 2, "Tesla P100-PCIE-16GB", 377.6)
    assert ('  model: "Tesla P100-PCIE-16GB"  # pbsnodes -a (tem-gpu01-el7.sdfarm.kr): gpu_status gpu_product_name'
            in text)
    assert "memory_gb: 377.6  # pbsnodes -a (tem-gpu01-el7.sdfarm.kr): status physmem 386709 MiB / 1024" in text
    assert spec.partitions["cpuQ"].gpus is None and spec.partitions["cpuQ"].nodes == 10
    assert '  partition: "gpuQ"  # pbsnodes -a, qstat -Qf; a job selects it with `qsub -q gpuQ`' in text


def test_pbs_queues_the_default_one_and_nodes_tied_by_their_queue_attribute(tmp_path):
    nodes = parse_pbsnodes((PBS / "unl_red_pbsnodes_a.txt").read_text())
    queues = parse_qstat_queues((PBS / "unl_red_qstat_Q_f.txt").read_text())
    assert len(queues) == 11 and default_queue((PBS / "unl_red_qstat_B_f.txt").read_text()) == "workq"
    placed, partitions = pbs_view.with_queues(nodes, queues, "workq")
    parts = {p.name: p for p in partitions}
    assert (parts["pushpa"].nodes, parts["lcgadmin"].nodes, parts["workq"].nodes) == (5, 1, 107)
    assert parts["workq"].default and not parts["pushpa"].default and parts["pushpa"].notes == ()
    assert parts["workq"].notes[0].startswith("no node is tied to it") and parts["workq"].limits == (
        ("resources_max.nodect", "444"), ("max_user_run", "444"))
    assert parts["pushpa"].time_limit == "resources_max.walltime 72:00:00"
    view = ClusterView("pbsnodes -a, qstat -Qf, qstat -Bf", tuple(placed), tuple(partitions), labels=pbs_view.LABELS)
    text, spec = _drafted(tmp_path, view, "pbs", None)
    assert spec.scheduler_options.partition == "workq" and spec.partitions["pushpa"].nodes == 5
    assert ('  partition: "workq"  # pbsnodes -a, qstat -Qf, qstat -Bf (the default); a job selects it with '
            "`qsub -q workq`") in text
    assert ("  time: \"00:30:00\"  # dlrun's default job time; the partition's longest job: resources_max.walltime "
            "24:00:00 (qstat -Qf)") in text


def test_systems_init_on_torque_asks_pbsnodes_then_qstat(monkeypatch, tmp_path):
    asked = _tools(monkeypatch, {"pbsnodes -a -F json": (2, None),  # Torque knows no -F
                                 "pbsnodes -a": (0, PBS / "kisti_torque_pbsnodes_a.txt"),
                                 "qstat -Qf": (0, PBS / "kisti_torque_qstat_Qf.txt")})
    drafted = draft("tem", tmp_path / "tem.yaml", scheduler="pbs", partition="cpuQ", probed=_probed())
    assert asked == ["pbsnodes -a -F json", "pbsnodes -a", "qstat -Qf", "qstat -Bf"]
    assert (drafted.spec.nodes, drafted.spec.scheduler_options.partition) == (10, "cpuQ")
    assert drafted.spec.partitions["gpuQ"].gpus["model"] == "Tesla P100-PCIE-16GB"


def test_hostile_pbs_output_is_bounded_never_markup_and_a_bad_queue_name_is_left_out(monkeypatch):
    queues = (PBS / "kisti_torque_qstat_Qf.txt").read_text()
    assert [q.name for q in parse_qstat_queues(queues.replace("Queue: cpuQ", "Queue: cpuQ`id`"))] == ["gpuQ"]
    nodes = (PBS / "kisti_torque_pbsnodes_a.txt").read_text()
    hostile = nodes.replace("gpu_product_name=Tesla P100-PCIE-16GB", "gpu_product_name=\x1b]8;;x\x07P100\u202e", 1)
    gpu01 = next(node for node in parse_pbsnodes(hostile) if node.name == "tem-gpu01-el7.sdfarm.kr")
    assert gpu01.gpu_type == "P100"
    monkeypatch.setattr(pbs_view, "MAX_OUTPUT_CHARS", nodes.index("tem-wn1003"))
    assert [node.name for node in parse_pbsnodes(nodes)] == ["tem-wn1001-el7.sdfarm.kr", "tem-wn1002-el7.sdfarm.kr"]
