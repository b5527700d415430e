"""Machine identity and quality in `compare`: runs of different sites or machines are refused with each
differing field named, unless compared along site, host or system or with --allow-mismatch; an unknown
machine cannot be shown to match; every point carries its quality verdict; a superlinear point is
implausible and left out of the verdict against a published number. Real SQLite stores, the CLI as a user
runs it."""
from __future__ import annotations

import json

import pytest
from compare_data import DGX2_NODE, add
from conftest import run_cli

from dlrun.results.compare import MismatchError, Reference, Source, compare
from dlrun.results.store.query import Filters
from dlrun.results.store import Store

#: Another machine at another site: what a Xeon 8480+ node with H100s reports.
H100_NODE = {**DGX2_NODE, "cpu": "Intel Xeon Platinum 8480+", "cpu_id": "GenuineIntel family 6 model 143 stepping 8",
             "isa": "x86-64-v4+amx_bf16+amx_int8+amx_tile+avx512_bf16+avx512_fp16+avx512_vnni+avx_vnni", "sockets": 2, "cores_per_socket": 56,
             "memory_gib": 2015, "gpu": "NVIDIA H100 80GB HBM3", "gpu_count": 8, "gpu_memory_gib": 80,
             "driver": "580.65.06", "cuda": "12.8"}
#: What the harness records of timed steps that nothing disturbed (the verdict's inputs).
CALM = {"window_s": 30.0, "steps": 100, "step_rate_spread": 0.01,
        "hosts": {"n1": {"others_share": 0.01, "node_cpus": 48, "threads_per_rank": 6, "cpus_per_rank": 6}}}
BUSY = {**CALM, "hosts": {"n1": {**CALM["hosts"]["n1"], "others_share": 0.45}}}


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("DLRUN_SITE", "a.example.org")
    return Store(tmp_path / "results.sqlite")


def test_runs_of_two_sites_and_machines_are_refused_naming_each_field(store):
    _two_sites(store)
    with pytest.raises(MismatchError) as refused:
        compare(store, Filters(), by="devices")
    lines = refused.value.differences
    assert "site: a.example.org (6 runs) ≠ b.example.org (6 runs)" in lines
    assert "cpu: Intel Xeon Platinum 8168 (6 runs) ≠ Intel Xeon Platinum 8480+ (6 runs)" in lines
    assert {line.split(":")[0] for line in lines} == {"site", "cpu", "cpu identity", "instruction set",
                                                      "cores (sockets x cores)", "memory (GiB)", "gpu",
                                                      "gpus per node", "gpu memory (GiB)", "driver", "cuda"}
    marked = compare(store, Filters(), by="devices", allow_mismatch=True)
    assert not marked.like_for_like and marked.differences == lines
    assert marked.sites == ["a.example.org", "b.example.org"] and len(marked.machines) == 2


def _two_sites(store, other_site="b.example.org"):
    for devices, a, b in ((1, [98, 100, 102], [148, 150, 152]), (2, [196, 198, 200], [290, 295, 300])):
        add(store, a, devices=devices, site="a.example.org", verdict_inputs=CALM)
        add(store, b, devices=devices, site=other_site, machine=H100_NODE, verdict_inputs=CALM)


@pytest.mark.parametrize("axis", ["site", "host"])
def test_along_site_or_host_they_are_compared(store, axis):
    _two_sites(store, other_site="b.example.org" if axis == "site" else "a.example.org")
    result = compare(store, Filters(), by=axis)
    assert result.like_for_like and result.mode == "relative"
    rows = {r["devices"]: r for r in result.rows}
    # ratios of geometric means (dlrun.results.compare.stats): close to the ratios of the middle values
    assert rows[1]["relative"] == pytest.approx(150 / 100, rel=1e-3)
    assert rows[2]["relative"] == pytest.approx(295 / 198, rel=1e-3)
    if axis == "host":  # two machines of one site, both `dgx2` to it: the machine is the axis
        assert rows[1]["host"] == ("Intel Xeon Platinum 8480+ 2x56 2015 GiB (GenuineIntel family 6 model 143 stepping 8), "
                                    "8x NVIDIA H100 80GB HBM3")


def test_along_host_the_sites_must_still_match_and_along_system_both_may_differ(store):
    _two_sites(store)
    with pytest.raises(MismatchError, match=r"site: a.example.org \(6 runs\) ≠ b.example.org \(6 runs\)") as refused:
        compare(store, Filters(), by="host")
    assert "several sites; --by site compares the sites" in str(refused.value)  # the axis that does
    assert compare(store, Filters(), by="site").like_for_like
    add(store, [140.0, 141.0, 142.0], devices=1, site="b.example.org", machine=H100_NODE, system="h100-box",
        verdict_inputs=CALM)
    both = compare(store, Filters(), by="system", baseline="dgx2", allow_mismatch=True)
    # along the system axis dgx2 and h100-box may differ in site and machine; dgx2's own runs may not
    assert both.differences and all(line.endswith("(pooled in system dgx2)") for line in both.differences)
    apart = compare(store, Filters(site=("b.example.org",)), by="system", baseline="h100-box")
    assert apart.like_for_like and [r["system"] for r in apart.rows] == ["dgx2"]


def test_a_machine_nobody_recorded_cannot_be_shown_to_match(store):
    add(store, [98, 100, 102], devices=1, machine=None)  # a run stored before dlrun kept fingerprints
    add(store, [196, 198, 200], devices=2)
    with pytest.raises(MismatchError, match=r"cpu: Intel Xeon Platinum 8168 \(3 runs\) ≠ unknown \(3 runs\) "
                                            r"\(cannot tell whether they match\)"):
        compare(store, Filters(), by="devices")
    with pytest.raises(MismatchError, match=r"host: the machine is unknown for 3 runs"):
        compare(store, Filters(), by="host")


def test_every_point_carries_its_verdict_and_the_comparison_counts_them(store):
    add(store, [98, 100, 102], devices=1, verdict_inputs=CALM)
    add(store, [196, 198, 200], devices=2, verdict_inputs=BUSY)
    add(store, [390, 396, 400], devices=4)  # no figures recorded (a log, or an old run)
    result = compare(store, Filters(), by="devices")
    verdicts = {r["devices"]: (r["quality"], r["quality_reasons"]) for r in result.rows}
    assert verdicts[1] == ("ok", [])
    assert verdicts[2] == ("contended", ["3 of 3 run(s) contended"])
    assert verdicts[4] == ("unknown", ["3 of 3 run(s) unknown"])
    assert result.quality == {"contended": 3, "unknown": 3, "ok": 3}
    assert {"quality", "quality_reasons"} <= set(result.columns)
    stored = Store(store.path).get_run(result.rows[1]["runs"][0])
    assert stored["quality"]["reasons"] == ["contended: other processes used 45 % of n1's CPUs (21.6 of its 48 CPUs) "
                                            "during the timed steps (more than 10 %)"]


def test_a_superlinear_point_is_implausible_and_left_out_of_the_published_verdict(store):
    add(store, [98, 100, 102], devices=1, verdict_inputs=CALM)
    forged = add(store, [398, 400, 402], devices=2, verdict_inputs=CALM)  # 200 % scaling efficiency
    scaling = compare(store, Filters(), by="devices")
    two = next(r for r in scaling.rows if r["devices"] == 2)
    assert two["quality"] == "implausible"
    assert two["quality_reasons"] == ["implausible: scaling efficiency 200 % over 1 device(s) (above 120 %)"]
    published = Reference(value=400.0, unit="images/sec", tolerance=0.05, match={"devices": 2},
                          source=Source("a forged paper", "Table 1", "400 img/s on 2 GPUs"), label="two GPUs")
    judged = compare(store, Filters(), references=[published], allow_mismatch=False)
    [row] = judged.rows
    assert row["runs"] == sorted(forged) and row["quality"] == "implausible"
    assert row["verdict"] == "left out: implausible"  # not within, outside or inconclusive
    assert any(note.startswith("left out of the verdict against two GPUs: the point is implausible")
               for note in judged.notes)


@pytest.fixture
def home(dlrun_home, monkeypatch):
    monkeypatch.setenv("DLRUN_SITE", "a.example.org")
    return {"DLRUN_HOME": str(dlrun_home), "DLRUN_SITE": "a.example.org", "COLUMNS": "250"}


def test_the_cli_names_the_fields_and_marks_points(home, dlrun_home):
    store = Store(dlrun_home / "results.sqlite")
    _two_sites(store)
    refused = run_cli("compare", "--by", "devices", env=home)
    assert refused.returncode == 1 and "  site: a.example.org (6 runs) ≠ b.example.org (6 runs)" in refused.stderr
    by_site = run_cli("compare", "--by", "site", "--baseline", "a.example.org", env=home, check=True)
    assert "sites: a.example.org, b.example.org; machines: " in by_site.stdout
    assert "all 12 runs are ok" in by_site.stdout
    add(store, [190.0, 191.0, 192.0], devices=2, site="a.example.org", verdict_inputs=BUSY, batch=32)
    add(store, [95.0, 96.0, 97.0], devices=1, site="a.example.org", verdict_inputs=CALM, batch=32)
    table = run_cli("compare", "--by", "devices", "--site", "a.example.org", "--allow-mismatch", env=home,
                    check=True)
    assert "┃ quality" in table.stdout and "contended" in table.stdout
    assert "3 of 12 runs are not ok: 3 contended" in table.stdout
    assert "  contended: workload resnet50, model resnet50_v1.5, devices 2: 3 of 6 run(s) contended" in table.stdout
    data = json.loads(run_cli("compare", "--by", "devices", "--site", "a.example.org", "--allow-mismatch",
                              "--json", env=home, check=True).stdout)
    assert data["quality"] == {"contended": 3, "ok": 9} and data["sites"] == ["a.example.org"]


def test_along_system_two_sites_runs_of_one_system_name_are_not_pooled(store):
    """Both sites call their machine `localhost`: compared along system, one place of the axis would hold
    two machines; refused, and --by site or --by host is what tells them apart."""
    add(store, [98.0, 100.0, 102.0], devices=1, system="localhost", site="a.example.org")
    add(store, [148.0, 150.0, 152.0], devices=1, system="localhost", site="b.example.org", machine=H100_NODE)
    add(store, [48.0, 50.0, 52.0], devices=1, system="dgx1v")
    with pytest.raises(MismatchError) as refused:
        compare(store, Filters(), by="system", baseline="dgx1v")
    assert "site: a.example.org (3 runs) ≠ b.example.org (3 runs) (pooled in system localhost)" in \
        refused.value.differences
    assert compare(store, Filters(system=("localhost",)), by="site").like_for_like


def test_rows_of_two_sites_and_machines_say_which_is_which(home, dlrun_home):
    """Compared anyway (--allow-mismatch), the rows of two sites on two machines look alike but for their
    numbers: the table prints the site and the machine of each row."""
    store = Store(dlrun_home / "results.sqlite")
    _two_sites(store)
    table = run_cli("compare", "--by", "devices", "--allow-mismatch", env=home, check=True).stdout
    header = next(line for line in table.splitlines() if "┃" in line and "site" in line)
    assert "machine" in header
    assert table.count("b.example.org") >= 2 and "Intel Xeon Platinum 8480+" in table
    one_site = run_cli("compare", "--by", "devices", "--site", "a.example.org", env=home,
                       check=True).stdout
    assert not any("┃" in line and "machine" in line for line in one_site.splitlines())
