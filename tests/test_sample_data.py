"""The sample data a fresh clone learns on (samples/README.md): the signed bundle imports into an empty store
against the shipped allowed-signers file, every run says it is sample data of one machine (site
sample-data.invalid, system localhost, signed by sample-data@dlrun), and compare, report and check work on it
as the README's "Sample data" block prints them."""
from __future__ import annotations

import json

from conftest import REPO, cli_json, run_cli

BUNDLE = REPO / "samples" / "sample-localhost.bundle"
SIGNERS = REPO / "samples" / "allowed_signers"
SITE = "sample-data.invalid"


def _imported() -> list[dict]:
    proc = run_cli("results", "import", str(BUNDLE), "--allowed-signers", str(SIGNERS), "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return cli_json("results", "list")


def test_the_sample_bundle_imports_and_says_what_it_is(dlrun_home):
    runs = _imported()
    assert len(runs) == 9
    assert {(r["site"], r["system"], r["workload"], r["image"], r["status"]) for r in runs} == {
        (SITE, "localhost", "trivial", "host", "ok")}
    shown = cli_json("results", "show", runs[0]["id"])
    assert shown["origin"] == "bundle" and "sample-data@dlrun" in json.dumps(shown)
    again = run_cli("results", "import", str(BUNDLE), "--allowed-signers", str(SIGNERS))
    assert again.returncode == 0 and len(cli_json("results", "list")) == 9  # importing twice adds nothing


def test_compare_report_and_check_work_on_the_sample_data(dlrun_home, tmp_path):
    _imported()
    scaling = cli_json("compare", "--site", SITE, "--workload", "trivial", "--precision", "fp32", "--by", "devices")
    assert scaling["mode"] == "scaling" and [r["devices"] for r in scaling["rows"]] == [1, 2]
    assert all(r["n"] == 3 and r["ci_low"] is not None for r in scaling["rows"])
    precision = cli_json("compare", "--site", SITE, "--workload", "trivial", "--nodes", "1", "--by", "precision",
                         "--baseline", "fp32")
    assert precision["mode"] == "regression" and precision["rows"]
    out = tmp_path / "sample-report"
    proc = run_cli("report", "--site", SITE, "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (out / "index.html").is_file()
    checked = run_cli("check", "--site", SITE)
    assert checked.returncode == 0, checked.stdout + checked.stderr  # no baseline yet: inconclusive, never failed
    assert checked.stdout.splitlines()[-1] == "dlrun check: 3 inconclusive"
