"""The audit's secret breaks, performed for real with its site workloads (tests/audit_site.py): a URL password with
`/` or a space (1), what the ranks printed of a secret after dlrun is SIGKILLed and the next command recovers
the run (2), a secret printed JSON-escaped, URL-encoded or shell-quoted (10), and secrets too short to
redact (11). After each, every file under the dlrun home (run directories, the store and its WAL), every
export (bundles with and without logs, CSV, JSON lines) and everything dlrun printed is searched for the
planted values and their forms."""
from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import subprocess
import sys
import tarfile
from pathlib import Path
from urllib.parse import quote

import audit_site
import pytest
from conftest import run_cli
from job_gate import wait_until

from dlrun.secrets import MIN_TEXT_MATCH, REDACTED
from dlrun.secrets.prints import PRINTS_NAME

SITE = {"DLRUN_SITE": "site-audit"}


@pytest.fixture
def audit(dlrun_home, tmp_path):
    audit_site.install(tmp_path / "xdg-config", tmp_path / "scripts")
    return tmp_path


def _planted() -> tuple[dict[str, str], list[str], dict[str, str]]:
    """(the variables, their --env arguments, every form that must be found nowhere)."""
    tag = secrets.token_hex(5)
    api = f"sk ключ'é-{tag}"  # non-ASCII, a space and a quote: every encoding differs from it
    password = f"pa/ss-{tag}"
    env = {"API_KEY": api, "DB_URL": f"postgres://bench:{password}@db.example.org/results", "HF_TOKEN": f"hf_{tag}x"}
    printf_q = subprocess.run(["bash", "-c", 'printf "%q" "$API_KEY"'], env={**os.environ, "API_KEY": api},
                              capture_output=True, text=True, check=True).stdout  # as the job's bash writes it
    forms = {"API_KEY": api, "API_KEY as JSON": json.dumps(api)[1:-1], "API_KEY URL-encoded": quote(api, safe=""),
             "API_KEY shell-quoted": shlex.quote(api), "API_KEY printf %q": printf_q,
             "DB_URL": env["DB_URL"], "DB_URL's password": password,
             "DB_URL's password URL-encoded": quote(password, safe=""), "HF_TOKEN": env["HF_TOKEN"]}
    return env, [f"--env={name}={value}" for name, value in env.items()], forms


def _exports(out: Path) -> list[str]:
    """Export the store every way; what the commands printed."""
    printed = []
    for args in (["--out", str(out / "logs.bundle"), "--with-logs"], ["--out", str(out / "plain.bundle")],
                 ["--out", str(out / "runs.csv")], ["--out", str(out / "runs.jsonl")]):
        proc = run_cli("results", "export", *args, env=SITE, check=True)
        printed += [proc.stdout, proc.stderr]
    return printed


def _members(bundle: Path) -> list[str]:
    with tarfile.open(bundle) as tar:
        return tar.getnames()


def _staging(home: Path) -> Path:
    [staging] = (home / "runs").glob(".staging-*")
    return staging


@pytest.mark.slow
def test_a_sigkilled_runs_secrets_are_found_nowhere_after_recovery(audit, dlrun_home):
    """Break 2 and the acceptance: leakyforms prints every form of three secrets (one a URL password with `/`)
    to stdout, stderr and files of its run directory, then sleeps; dlrun is SIGKILLed; the next command
    recovers the run `lost`; nothing of the values is left anywhere, --with-logs bundles included."""
    env, args, forms = _planted()
    dlrun = subprocess.Popen([sys.executable, "-m", "dlrun.cli", "run", "leakyforms", *args], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env={**os.environ, **SITE})
    wait_until(lambda: dlrun.poll() is not None or (
        list((dlrun_home / "runs").glob(".staging-*/output.log"))
        and "READY" in _staging(dlrun_home).joinpath("output.log").read_text()), "the job printed its secrets")
    staging = _staging(dlrun_home)
    assert env["HF_TOKEN"] in (staging / "leaked-file.txt").read_text()  # the attack is real: in clear now
    dlrun.kill()
    printed = list(dlrun.communicate(timeout=60))
    wait_until(lambda: not audit_site.run_dir_processes(staging), "the job's end")

    listed = run_cli("results", "list", "--json", env=SITE, check=True)  # the next command recovers the run
    [run] = json.loads(listed.stdout)
    assert run["status"] == "lost"
    run_dir = Path(run["run_dir"])
    shown = run_cli("results", "show", run["id"], "--json", env=SITE, check=True)
    printed += [listed.stdout, listed.stderr, shown.stdout, shown.stderr, *_exports(audit / "out")]

    assert audit_site.found_anywhere([dlrun_home, audit / "out"], forms, printed) == []
    # redacted where they were, and the files the workload wrote travel in the bundle, its fingerprints not
    assert f"dbpass {REDACTED}" in (run_dir / "output.log").read_text()
    assert f"plain {REDACTED}" in (run_dir / "stderr.log").read_text()
    assert REDACTED in (run_dir / "out" / "deeper" / "environ.json").read_text()
    members = _members(audit / "out" / "logs.bundle")
    assert f"logs/{run['id']}/leaked-file.txt" in members and f"logs/{run['id']}/out/deeper/environ.json" in members
    assert not [m for m in members if m.endswith(PRINTS_NAME)]


@pytest.mark.slow
def test_an_export_redacts_what_a_run_directory_still_holds(audit, dlrun_home):
    """The export's own check: a file of a stored run that holds a secret (written after the run was redacted,
    or a dlrun killed while it redacted) travels redacted in a --with-logs bundle; the run directory stays as
    it is."""
    env, args, forms = _planted()
    run_cli("run", "fast", *args, env=SITE, check=True)
    [run_dir] = [p for p in (dlrun_home / "runs").iterdir() if p.is_dir()]
    late = run_dir / "late.txt"
    late.write_text("\n".join(forms.values()) + "\n")
    printed = _exports(audit / "out")
    assert late.read_text().count("\n") == len(forms) and env["HF_TOKEN"] in late.read_text()
    assert f"logs/{run_dir.name}/late.txt" in _members(audit / "out" / "logs.bundle")
    assert audit_site.found_anywhere([audit / "out"], forms, printed) == []


@pytest.mark.slow
def test_a_url_password_with_a_slash_or_a_space_is_secret(audit, dlrun_home):
    """Break 1: `https://bob:pa/ss@h.example/x` was shown by `dlrun plan` and stored in clear in run.sh,
    plan.json, environment.json, provenance.json, the store and bundles."""
    tag = secrets.token_hex(4)
    values = {"CONN": f"https://bob:pa/ss{tag}@h.example/x", "CONN_SPACE": f"https://bob:pa ss{tag}@h.example/x"}
    args = [f"--env={name}={value}" for name, value in values.items()]
    forms = {"the password with /": f"pa/ss{tag}", "the password with a space": f"pa ss{tag}"}
    plan = run_cli("plan", "fast", *args, env=SITE, check=True)
    assert json.loads(plan.stdout)["env"] == {**json.loads(plan.stdout)["env"], "CONN": REDACTED,
                                              "CONN_SPACE": REDACTED}
    dry = run_cli("run", "fast", *args, "--dry-run", env=SITE, check=True)
    ran = run_cli("run", "fast", *args, env=SITE, check=True)
    printed = [plan.stdout, plan.stderr, dry.stdout, dry.stderr, ran.stdout, ran.stderr, *_exports(audit / "out")]
    assert audit_site.found_anywhere([dlrun_home, audit / "out"], forms, printed) == []
    [run_dir] = [p for p in (dlrun_home / "runs").iterdir() if p.is_dir()]
    assert 'export CONN="${CONN}"' in (run_dir / "run.sh").read_text()  # by reference, as every secret


@pytest.mark.slow
def test_a_secret_printed_encoded_is_redacted(audit, dlrun_home):
    """Break 10: dribble prints `json.dumps` of a non-ASCII API_KEY (`\\u` escapes); printforms prints it
    URL-encoded and shell-quoted (shlex, bash's printf %q) too, and a URL's password alone. Redacted in the
    live output, the run directory, the store and bundles."""
    env, args, forms = _planted()
    dribble = run_cli("run", "dribble", *args, env=SITE)
    assert dribble.returncode == 1  # no result: the run is stored failed, its output kept
    [run_dir] = [p for p in (dlrun_home / "runs").iterdir() if p.is_dir()]
    assert (run_dir / "output.log").read_text().strip() == json.dumps({"t": REDACTED})
    printforms = run_cli("run", "printforms", *args, "--verbose", env=SITE)
    assert printforms.returncode == 1 and "shell " + REDACTED in printforms.stdout + printforms.stderr
    printed = [dribble.stdout, dribble.stderr, printforms.stdout, printforms.stderr, *_exports(audit / "out")]
    assert audit_site.found_anywhere([dlrun_home, audit / "out"], forms, printed) == []


@pytest.mark.mpi
def test_secrets_too_short_to_redact_are_warned_about(audit, dlrun_home):
    """Break 11: a secret shorter than MIN_TEXT_MATCH characters cannot be told from other text, so what the
    ranks print of it stays: every command that plans a run says so (without the value), and the README says
    where the bound is. The longer secrets of the same run are redacted from every rank's output."""
    tag = secrets.token_hex(4)
    args = [f"--env=HF_TOKEN=hf_{tag}", "--env=SHORT_TOKEN=x9q", f"--env=DB_URL=postgres://u:pw@db{tag}.example/x"]
    warnings = ["SHORT_TOKEN is secret but its value has only 3 character(s): what the ranks print of it is not "
                "redacted", "the password in DB_URL has only 2 character(s)"]
    for command in (["plan", "rankleak"], ["run", "rankleak", "--dry-run"],
                    ["run", "rankleak", "--ranks-per-node", "2"]):
        proc = run_cli(*command, *args, env=SITE, check=True)
        for warning in warnings:
            assert warning in proc.stderr, (command, proc.stderr)
        assert "x9q" not in proc.stderr
    [run_dir] = [p for p in (dlrun_home / "runs").iterdir() if p.is_dir()]
    ranks = sorted(run_dir.glob("logs/*/rank.*/stdout"))
    assert len(ranks) == 2 and all(f"sees {REDACTED} x9q {REDACTED}" in p.read_text() for p in ranks)
    assert audit_site.found_anywhere([dlrun_home], {"HF_TOKEN": f"hf_{tag}", "DB_URL": f"db{tag}.example"}) == []
    docs = (Path(__file__).resolve().parents[1] / "docs" / "running.md").read_text()
    section = docs[docs.index("## Secrets"):][:4000]
    assert re.search(rf"shorter than {MIN_TEXT_MATCH} characters", section), "the docs state the bound"
