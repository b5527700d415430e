"""`dlrun check`, the nightly gate: stored runs (real SQLite stores, written through the store API as a run
records them) judged against the site's baseline, its references in config.yaml and an experiment's
published numbers; exit 1 on a regression only, 0 on inconclusive and passing sets, 2 on bad input; the
JUnit XML read back by junitparser, the JUnit library CI tools are scripted with. The intervals are
compare's: checked against scipy.stats' Welch test on the logs (compare_data.welch_on_logs)."""
from __future__ import annotations

import json
import re

import junitparser
import pytest
from compare_data import add, around, welch_on_logs
from conftest import run_cli

from dlrun.results.store import Store


def _stamp(day: int, n: int) -> str:
    return f"2026-03-{day:02d}T02:00:{n:02d}Z"


@pytest.fixture
def store(dlrun_home, monkeypatch):
    monkeypatch.setenv("DLRUN_SITE", "here")
    return Store(dlrun_home / "results.sqlite")


def _nights(store: Store, nightly: list[list[float]], **fields) -> list[list[str]]:
    """Runs made night after night (each night's values in order), with their creation times."""
    ids = []
    for day, values in enumerate(nightly, start=1):
        ids.append([add(store, [value], created=_stamp(day, n), **fields)[0] for n, value in enumerate(values)])
    return ids


BASELINE = [around(1000.0, 1.01), around(1000.0, 1.012), around(1000.0, 1.008)]  # nine runs over three nights


def _config(dlrun_home, text: str) -> None:
    path = dlrun_home.parent / "xdg-config" / "dlrun" / "config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _read_junit(path):
    document = junitparser.JUnitXml.fromfile(str(path))
    cases = [(suite.name, case) for suite in document for case in suite]
    kinds = {case.name: [type(r).__name__ for r in case.result] for _, case in cases}
    return document, cases, kinds


def test_a_stored_slowdown_fails_the_gate_with_a_junit_failure(store, dlrun_home, tmp_path):
    _nights(store, [*BASELINE, around(900.0, 1.01)])                   # the newest night: 10 % slower
    out = tmp_path / "out.xml"
    proc = run_cli("check", "--junit", str(out))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = proc.stdout.splitlines()[0]
    assert line.startswith("REGRESSION") and "against baseline" in line
    welch = welch_on_logs([v for night in BASELINE for v in night], around(900.0, 1.01))
    assert f"{welch['ratio']:.3f} x the baseline's" in line
    assert f"95 % CI of the ratio {welch['low']:.3f}-{welch['high']:.3f}" in line
    assert "median 1,000 images/sec of 9 earlier ok run(s)" in line
    assert proc.stdout.splitlines()[-1] == f"dlrun check: 1 regression; JUnit XML written to {out}"
    document, cases, kinds = _read_junit(out)
    assert (document.tests, document.failures, document.errors, document.skipped) == (1, 1, 0, 0)
    [(suite, case)] = cases
    assert suite == "dlrun check: dgx2" and case.classname == "dlrun.check.dgx2"
    assert kinds[case.name] == ["Failure"] and case.result[0].type == "regression"
    assert "0.9" in case.result[0].message and "REGRESSION" in case.system_out


def test_an_unchanged_night_passes_and_a_noisy_one_is_inconclusive_with_the_repeats_that_would_decide(store, tmp_path):
    _nights(store, [*BASELINE, around(1001.0, 1.01)], devices=1)
    _nights(store, [*BASELINE, [780.0, 900.0, 1040.0]], devices=2, nodes=1)  # wide: straddles the band's edge
    out = tmp_path / "out.xml"
    proc = run_cli("check", "--junit", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    inconclusive = [line for line in lines if line.startswith("INCONCLUSIVE")]
    passed = [line for line in lines if line.startswith("PASS")]
    assert len(inconclusive) == 1 and "2 devices" in inconclusive[0]
    assert re.search(r"about \d+ repeats per point would decide", inconclusive[0]), inconclusive[0]
    assert len(passed) == 1 and "1 device," in passed[0]
    assert lines[-1].startswith("dlrun check: 1 inconclusive, 1 pass")
    document, cases, kinds = _read_junit(out)
    assert (document.tests, document.failures, document.errors, document.skipped) == (2, 0, 0, 1)
    assert sorted(map(tuple, kinds.values())) == [(), ("Skipped",)]
    data = json.loads(run_cli("check", "--json", check=True).stdout)
    needed = [o["repeats_needed"] for o in data["outcomes"] if o["outcome"] == "inconclusive"]
    assert len(needed) == 1 and needed[0] > 3
    assert data["counts"] == {"inconclusive": 1, "pass": 1}


def test_a_faster_night_passes_and_the_first_night_has_no_baseline_yet(store, tmp_path):
    _nights(store, [*BASELINE, around(1200.0, 1.01)], system="dgx2")
    _nights(store, [around(500.0, 1.01)], system="rtx-ts4")
    proc = run_cli("check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    by_system = {line.rsplit(" on ", 1)[1].split(" ")[0]: line for line in proc.stdout.splitlines()[:-1]}
    assert by_system["dgx2"].startswith("PASS") and "better than the baseline beyond the band" in by_system["dgx2"]
    assert by_system["rtx-ts4"].startswith("INCONCLUSIVE") and "no baseline yet" in by_system["rtx-ts4"]


def test_the_sites_references_in_config_yaml_are_judged_per_system(store, dlrun_home, tmp_path):
    _nights(store, [around(1000.0, 1.01)], devices=1)
    _nights(store, [around(1900.0, 1.01)], devices=2)
    _config(dlrun_home, "references:\n  dgx2:\n"
                        "    - {match: {devices: 1}, value: 1010, unit: images/sec, tolerance_pct: 5,\n"
                        "       source: {doc: acceptance test, where: 2026-02}}\n"
                        "    - {match: {devices: 2}, value: 2200, unit: images/sec, tolerance_pct: 5}\n")
    out = tmp_path / "out.xml"
    proc = run_cli("check", "--junit", str(out))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = {("2 devices" in line): line for line in proc.stdout.splitlines()[:-1]}
    assert lines[True].startswith("REGRESSION") and "against site reference" in lines[True]
    assert "x the reference 2,200 images/sec (band ±5 %)" in lines[True]
    assert lines[False].startswith("PASS") and "x the reference 1,010 images/sec" in lines[False]
    _, cases, _ = _read_junit(out)
    outs = {case.name: case.system_out for _, case in cases}
    assert any("reference: acceptance test, 2026-02" in text for text in outs.values())
    assert any("reference: this site's config.yaml" in text for text in outs.values())


def test_a_site_reference_without_runs_is_inconclusive_and_a_bad_one_is_refused(store, dlrun_home):
    _nights(store, [around(1000.0, 1.01)])
    _config(dlrun_home, "references:\n  dgx2:\n    - {match: {devices: 8}, value: 7000, unit: images/sec}\n")
    proc = run_cli("check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert any(line.startswith("INCONCLUSIVE devices 8 on dgx2 against site reference: no stored ok run")
               for line in proc.stdout.splitlines())
    _config(dlrun_home, "references:\n  dgx2:\n    - {match: {devics: 8}, value: 7000}\n")
    proc = run_cli("check")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "unknown key field 'devics'; did you mean 'devices'?" in proc.stderr


@pytest.mark.parametrize("args, said", [(["--newest", "0"], "bad --newest 0"),
                                        (["--tolerance", "120"], "bad --tolerance 120"),
                                        (["--system", "dgx-2"], "dgx-2")])
def test_bad_options_are_one_line_and_exit_2(store, args, said):
    _nights(store, [around(1000.0, 1.01)])
    proc = run_cli("check", *args)
    assert proc.returncode == 2 and said in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_an_experiments_published_numbers_are_judged_as_reproduce_judges_them(dlrun_home, tmp_path):
    # before any run: every published number is inconclusive (no stored run), and the gate passes
    proc = run_cli("check", "--experiment", "E001_table2_model_facts")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()[:-1]
    assert lines and all(line.startswith("INCONCLUSIVE") and "against published" in line for line in lines)
    # the model facts counted by dlrun reproduce (in-process) against Table II
    run_cli("reproduce", "E001_table2_model_facts", check=True)
    out = tmp_path / "facts.xml"
    proc = run_cli("check", "--experiment", "E001_table2_model_facts", "--junit", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    passed = [line for line in proc.stdout.splitlines() if line.startswith("PASS")]
    assert any("resnet50_params (params)" in line and "published 25,560,000 parameters" in line for line in passed)
    document, _, _ = _read_junit(out)
    assert document.tests >= len(passed) > 0 and document.failures == 0
