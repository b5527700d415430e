"""`dlrun diagnose`: the rounds of pairs, the rules that name a node or a link, and the command on a real
Slurm cluster whose nodes are network namespaces (tests/fixtures_netns.py), one node's link slowed by a real
token-bucket rate limit, and the same cluster without it."""
from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys

import pytest

from dlrun.diagnose import Probe, attribute, rounds
from dlrun.diagnose.verdict import reference


@pytest.mark.parametrize("count", range(2, 10))
def test_rounds_cover_every_pair_once_with_disjoint_pairs_per_round(count):
    nodes = [f"n{index}" for index in range(count)]
    found = rounds(nodes)
    pairs = [pair for group in found for pair in group]
    assert sorted(pairs) == sorted(itertools.combinations(nodes, 2))
    assert all(len({node for pair in group for node in pair}) == 2 * len(group) for group in found)
    assert len(found) == (count - 1 if count % 2 == 0 else count)


def _pair(a: str, b: str, value: float | None, verdict: str | None = None) -> Probe:
    baseline = {"verdict": verdict, "verdict_why": "-30 % from the median"} if verdict else {}
    return Probe((a, b), "ok" if value is not None else "failed", value, "GB/s", "busbw", f"r{a}{b}",
                 None if value is not None else "exit 1", baseline)


def test_one_slow_node_among_three_is_named_and_no_link_is():
    verdicts = attribute([_pair("d1", "d2", 0.012), _pair("d1", "d3", 0.70), _pair("d2", "d3", 0.011)])
    assert [(f.kind, f.subject) for f in verdicts.findings] == [("node", "d2")]
    assert "without it d1,d3 is not" in verdicts.findings[0].why and verdicts.pair_reference == 0.70


def test_a_slow_link_between_two_good_nodes_is_a_link():
    pairs = [_pair(a, b, 0.2 if (a, b) == ("n1", "n2") else 0.7) for a, b in itertools.combinations(
        ["n1", "n2", "n3", "n4"], 2)]
    verdicts = attribute(pairs)
    assert [(f.kind, f.subject) for f in verdicts.findings] == [("link", "n1,n2")]


def test_a_node_whose_pairs_all_failed_is_named():
    verdicts = attribute([_pair("a", "b", None), _pair("a", "c", 0.7), _pair("b", "c", None)])
    assert [(f.kind, f.subject) for f in verdicts.findings] == [("node", "b")]
    assert "failed: exit 1" in verdicts.findings[0].why


def test_even_pairs_within_the_threshold_find_nothing():
    assert attribute([_pair("d1", "d2", 0.66), _pair("d1", "d3", 0.70), _pair("d2", "d3", 0.61)]).findings == ()


def test_every_pair_below_the_baseline_is_one_finding_the_pairs_cannot_show():
    pairs = [_pair(a, b, 0.5, "below baseline") for a, b in itertools.combinations("xyz", 2)]
    verdicts = attribute(pairs)
    assert [(f.kind, f.subject) for f in verdicts.findings] == [("baseline", "every pair")]


def test_a_slow_single_node_probe_is_compute():
    singles = [Probe((node,), "ok", value, "samples/s", "throughput", f"r{node}")
               for node, value in (("a", 100.0), ("b", 97.0), ("c", 55.0), ("d", 101.0))]
    verdicts = attribute([_pair("a", "b", 0.7)], singles)
    assert [(f.kind, f.subject) for f in verdicts.findings] == [("compute", "c")]


def test_the_reference_is_the_median_of_the_best_quarter():
    assert reference([1.0, 2.0, 3.0]) == 3.0
    assert reference([1.0] * 4 + [5.0, 6.0, 7.0, 8.0]) == 7.5
    with pytest.raises(ValueError, match="threshold"):
        attribute([], threshold=1.5)


def _dlrun(cluster, home, *argv: str, **extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, **cluster.env, "DLRUN_HOME": str(home), "XDG_CONFIG_HOME": str(home / "xdg"), **extra}
    return subprocess.run([sys.executable, "-m", "dlrun.cli", *argv], capture_output=True, text=True, env=env,
                          cwd=home, timeout=600)


def test_nodes_come_from_the_allocation_and_from_sinfo(netns_cluster, tmp_path):
    system = "--system=dlrun-netcluster"
    inside = _dlrun(netns_cluster, tmp_path, "diagnose", system, "--dry-run", SLURM_JOB_NODELIST="d[1-3]")
    assert inside.returncode == 0, inside.stderr
    assert "3 nodes from this slurm allocation: d1, d2, d3" in inside.stdout
    assert "round 1: allreduce_probe on d2,d3" in inside.stdout and "#SBATCH --nodelist=d2,d3" in inside.stdout
    listed = _dlrun(netns_cluster, tmp_path, "diagnose", system, "--dry-run")
    assert "3 nodes from" in listed.stdout and "partition all" in listed.stdout, listed.stderr
    one = _dlrun(netns_cluster, tmp_path, "diagnose", system, "--nodelist", "d1")
    assert one.returncode == 2 and one.stderr.count("\n") == 1 and "valid: 2 to" in one.stderr


def test_diagnose_names_the_node_whose_link_is_slowed_and_none_without(netns_cluster, tmp_path):
    """Twice on d1, d2, d3: as set up (nothing found; its three runs, of one key, become the baseline), then
    with d2's link limited to 100 Mbit/s in both directions and a training run on each node alone (d2 found,
    by the pairs and against the baseline)."""
    # Threshold 0.3: the rate limit makes its pairs some 40 times slower; the other worker's load on this
    # two-core machine can make a clean pair half as fast as another, never a third.
    argv = ("diagnose", "--system", "dlrun-netcluster", "--threshold", "0.3", "--json")
    clean = _dlrun(netns_cluster, tmp_path, *argv)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    first = json.loads(clean.stdout)
    assert first["findings"] == [] and [p["status"] for p in first["pairs"]] == ["ok"] * 3
    fast = min(p["value"] for p in first["pairs"])
    netns_cluster.slow_link("d2")
    try:
        assert "tbf" in netns_cluster.qdisc("d2") and "tbf" not in netns_cluster.qdisc("d1")
        slowed = _dlrun(netns_cluster, tmp_path, *argv, "--node-workload", "trivial")
    finally:
        netns_cluster.restore_link("d2")
    assert slowed.returncode == 1, slowed.stdout + slowed.stderr
    found = json.loads(slowed.stdout)
    assert [(f["kind"], f["subject"]) for f in found["findings"]][0] == ("node", "d2")
    by_pair = {",".join(p["nodes"]): p for p in found["pairs"]}
    assert by_pair["d1,d3"]["slow"] is False and by_pair["d1,d2"]["slow"] and by_pair["d2,d3"]["slow"]
    assert by_pair["d1,d2"]["value"] < 0.5 * fast  # 100 Mbit/s is 0.0125 GB/s; the veths carry far more
    assert by_pair["d1,d2"]["baseline"]["verdict"] == "below baseline"
    assert by_pair["d1,d2"]["baseline"]["history_n"] == 3
    assert [(p["nodes"], p["status"], p["unit"]) for p in found["singles"]] == [
        ([node], "ok", "images/sec") for node in ("d1", "d2", "d3")]


@pytest.mark.parametrize("system,image,directive", [
    ("txgaia", None, "#SBATCH --nodelist=c-01,c-07"),
    ("summitdev", None, '#BSUB -m "c-01 c-07"'),
    ("prace-1080ti", None, "#PBS -l select=1:host=c-01:ncpus="),
])
def test_nodelist_names_the_jobs_nodes_in_each_schedulers_directive(dlrun_home, system, image, directive):
    from conftest import run_cli

    argv = ["run", "resnet50", "--system", system, "--nodes", "2", "--nodelist", "c-01,c-07", "--dry-run"]
    proc = run_cli(*argv, *(["--image", image] if image else []))
    assert proc.returncode == 0, proc.stderr
    assert directive in proc.stdout
    if system == "prace-1080ti":
        assert "+1:host=c-07:ncpus=" in proc.stdout


@pytest.mark.parametrize("nodelist,system,says", [
    ("c-01", "txgaia", "names 1 nodes for a job of 2; valid: 2 host names"),
    ("c-01,c-01", "txgaia", "names a node twice"),
    ("c-01,$(reboot)", "txgaia", "'$(reboot)' is not a host name"),
    ("c-01,c-02", "localhost", "with scheduler local, which places jobs itself"),
])
def test_a_bad_nodelist_is_one_line_and_exit_2(dlrun_home, nodelist, system, says):
    from conftest import run_cli

    nodes = ["--nodes", "2"] if system != "localhost" else []
    proc = run_cli("run", "resnet50", "--system", system, "--image", "pytorch1.0-nvcr18.11", *nodes,
                   "--nodelist", nodelist, "--dry-run")
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.count("\n") == 1 and says in proc.stderr
