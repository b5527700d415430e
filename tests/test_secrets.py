"""Secrets are never written: the name and value rules (dlrun.secrets), and a planted-secret test that sends
12 secrets through real local and mpirun runs and through Slurm, LSF and PBS jobs (stand-in batch tools that
run the job here, with each batch system's environment rules), then searches every file under the dlrun
home, the store and every line dlrun printed. The ranks must still receive every value."""
from __future__ import annotations

import json
import os
import secrets
import sqlite3
import sys
from pathlib import Path

import fake_batch
import pytest
from conftest import run_cli

from dlrun.paths import HARNESS_DIR
from dlrun.secrets import (REDACTED, has_url_password, is_secret_name, redact_argv, redact_env, redact_text,
                           secret_names)

# One name per word of the rule, and the names the rule must leave alone.
SECRET_NAMES = ["HF_TOKEN", "GITHUB_TOKENS", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "PGPASSWORD", "LDAP_PASSWD",
                "MYSQL_PWD", "DB_PASS", "GITHUB_PAT", "CI_JOB_JWT", "OPENAI_API_KEY", "apiKey", "SSH_KEY",
                "GOOGLE_APPLICATION_CREDENTIALS", "AUTH", "HTTP_AUTHORIZATION", "BROWSER_COOKIE", "FLASK_SESSION",
                "SLACK_WEBHOOK_URL", "PRIVATE_REGISTRY", "hfToken", "DEPLOY_PRIVKEY", "NPM_ACCESSTOKEN"]
NOT_SECRET = ["PATH", "HOME", "PWD", "OLDPWD", "MONKEY", "KEYBOARD_LAYOUT", "TOKENIZERS_PARALLELISM",
              "GIT_AUTHOR_NAME", "PASSENGER_APP_ENV", "OMP_NUM_THREADS", "NCCL_IB_HCA", "LD_LIBRARY_PATH",
              "PATTERN", "SESSIONS_DIR_COUNT_X", "BYPASS_PROXY"]


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_secret_names(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", NOT_SECRET)
def test_names_that_are_not_secrets(name):
    assert not is_secret_name(name)


def test_values_with_a_url_password_are_secret_whatever_the_name():
    assert has_url_password("postgres://bench:pw0rd@db.example.org:5432/results")
    assert has_url_password("https://:ghp_abc@github.com/org/repo.git")
    for value in ("https://github.com/org/repo.git", "ssh://git@github.com/x", "user@host:/path", "a=b:c@d"):
        assert not has_url_password(value)
    env = {"DATABASE_URL": "postgres://bench:pw0rd@db/x", "MIRROR": "https://pypi.org/simple", "MARKED": "m4rk"}
    assert secret_names(env, marked=["MARKED"]) == {"DATABASE_URL", "MARKED"}
    assert redact_env(env, ["MARKED"]) == {"DATABASE_URL": REDACTED, "MARKED": REDACTED,
                                           "MIRROR": "https://pypi.org/simple"}
    assert redact_text("clone https://u:pw0rd@host/x done") == f"clone https://u:{REDACTED}@host/x done"


def test_command_lines_are_recorded_without_values():
    argv = ["dlrun", "run", "trivial", "--env", "HF_TOKEN=t0ken", "-e", "FOO=bar", "--secret-env", "PLAIN=v4lue",
            "--secret-env", "FROM_ENV", "--env=DB_PASS=pw", "--env", "URL=https://u:p4ss@h/x", "--launcher-arg",
            "--mca=x", "--env", "LEAKY=s3cret-in-another-var"]
    out = redact_argv(argv, marked=["LEAKY"], values=["s3cret-in-another-var"])
    assert out == ["dlrun", "run", "trivial", "--env", f"HF_TOKEN={REDACTED}", "-e", "FOO=bar", "--secret-env",
                   f"PLAIN={REDACTED}", "--secret-env", "FROM_ENV", f"--env=DB_PASS={REDACTED}", "--env",
                   f"URL={REDACTED}", "--launcher-arg", "--mca=x", "--env", f"LEAKY={REDACTED}"]


# ------------------------------------------------------------------------------------------------ planted
SPY = """#!/bin/sh
# Records which secrets reached this rank (outside the dlrun home), then runs the harness.
for name in {names}; do printf '%s=%s\\n' "$name" "$(printenv "$name")"; done > "{seen}/rank.$$"
exec {python} "$@"
"""


@pytest.fixture
def planted(tmp_path, dlrun_home):
    values = {name: f"{name.lower()}-{secrets.token_hex(6)}" for name in (
        "HF_TOKEN", "GITHUB_PAT", "DB_PASS", "MYSQL_PWD", "SLACK_WEBHOOK_URL", "CI_JOB_JWT",
        "AWS_SECRET_ACCESS_KEY", "OPENAI_API_KEY", "GCP_CREDENTIALS", "BENCH_LICENSE", "LICENSE_SERVER")}
    password = f"pw-{secrets.token_hex(6)}"
    values["DATABASE_URL"] = f"postgres://bench:{password}@db.example.org/results"
    searched = {**values, "DATABASE_URL": password}  # the URL's password is what must not be written
    seen = tmp_path / "seen"
    seen.mkdir()
    spy = tmp_path / "spy-python"
    spy.write_text(SPY.format(names=" ".join(values), seen=seen, python=sys.executable))
    spy.chmod(0o755)
    env = fake_batch.install(tmp_path / "batch")
    (tmp_path / "batch" / "site" / "images").mkdir()
    (tmp_path / "batch" / "site" / "images" / "spy.yaml").write_text(
        f"name: spy\ndescription: this machine's Python, recording the secrets a rank sees\nkind: host\n"
        f"arch: [{os.uname().machine}]\npython: {spy}\n"
        f"harness_dir: {HARNESS_DIR}\n")
    env["BENCH_LICENSE"] = values["BENCH_LICENSE"]  # --secret-env NAME takes it from dlrun's environment
    args = [f"--env={name}={values[name]}" for name in values if name not in ("BENCH_LICENSE", "LICENSE_SERVER")]
    args += ["--secret-env", "BENCH_LICENSE", "--secret-env", f"LICENSE_SERVER={values['LICENSE_SERVER']}"]
    return {"values": values, "searched": searched, "seen": seen, "env": env, "args": args, "home": dlrun_home,
            "tmp": tmp_path}


def _found(text: str, searched: dict[str, str]) -> list[str]:
    return [name for name, value in searched.items() if value in text]


@pytest.mark.mpi
def test_planted_secrets_are_never_written_and_reach_every_rank(planted):
    values, searched, seen, env = planted["values"], planted["searched"], planted["seen"], planted["env"]
    outputs: list[str] = []
    common = ["trivial", "--image", "spy", "--steps", "1", "--warmup-steps", "1", "--batch-size", "2",
              *planted["args"]]
    runs = [("local", []), ("mpirun", ["--ranks-per-node", "2"]), ("slurm", ["--system", "fake-slurm"]),
            ("lsf", ["--system", "fake-lsf"]), ("pbs", ["--system", "fake-pbs"])]
    for label, extra in runs:
        for old in seen.iterdir():
            old.unlink()
        job_env = {**env, "FAKE_BATCH_STATE": str(planted["tmp"] / f"state-{label}")}
        for command in (["plan", *common, *extra], ["run", *common, *extra, "--dry-run"]):
            proc = run_cli(*command, env=job_env)
            assert proc.returncode == 0, proc.stderr
            outputs += [proc.stdout, proc.stderr]
        proc = run_cli("run", *common, *extra, env=job_env, timeout=300)
        outputs += [proc.stdout, proc.stderr]
        assert proc.returncode == 0, f"{label}: {proc.stdout}\n{proc.stderr}"
        ranks = sorted(seen.iterdir())
        assert len(ranks) == (2 if label == "mpirun" else 1), label
        for rank in ranks:  # every value arrived, byte for byte
            got = dict(line.split("=", 1) for line in rank.read_text().splitlines())
            assert got == values, label
    for command in (["results", "list"], ["results", "list", "--json"]):
        proc = run_cli(*command, env=env)
        outputs += [proc.stdout, proc.stderr]
    runs_listed = json.loads(outputs[-2])
    assert [r["status"] for r in runs_listed] == ["ok"] * 5
    assert {r["scheduler"] for r in runs_listed} == {"local", "slurm", "lsf", "pbs"}
    for run in runs_listed:
        shown = run_cli("results", "show", run["id"], "--json", env=env)
        outputs += [shown.stdout, shown.stderr]
        assert json.loads(shown.stdout)["plan"]["env"]["HF_TOKEN"] == REDACTED
        plan = json.loads((Path(run["run_dir"]) / "plan.json").read_text())
        assert plan["env"]["DATABASE_URL"] == REDACTED and plan["secret_env"] == ["BENCH_LICENSE", "LICENSE_SERVER"]

    assert _found("\n".join(outputs), searched) == [], "a secret was printed"
    files = [p for p in planted["home"].rglob("*") if p.is_file()]
    assert len(files) > 50
    for path in files:
        assert _found(path.read_bytes().decode(errors="replace"), searched) == [], f"a secret in {path}"
    store = sqlite3.connect(planted["home"] / "results.sqlite")
    assert _found("\n".join(store.iterdump()), searched) == []
    # and the run scripts take every one from the environment, by name
    script = (Path(runs_listed[0]["run_dir"]) / "run.sh").read_text()
    assert all(f'export {name}="${{{name}}}"' in script for name in values)


@pytest.mark.slow
def test_private_run_directories_and_store(dlrun_home):
    proc = run_cli("run", "trivial", "--steps", "1", "--warmup-steps", "1", "--batch-size", "2")
    assert proc.returncode == 0, proc.stderr
    home = dlrun_home
    assert (home.stat().st_mode & 0o777, (home / "runs").stat().st_mode & 0o777) == (0o700, 0o700)
    assert (home / "results.sqlite").stat().st_mode & 0o777 == 0o600
    [run_dir] = (home / "runs").iterdir()
    assert run_dir.stat().st_mode & 0o777 == 0o700
    assert (run_dir / "run.sh").stat().st_mode & 0o777 == 0o700
    assert all(p.stat().st_mode & 0o077 == 0 for p in run_dir.iterdir() if p.is_file())


def test_secrets_are_refused_where_only_a_manifest_could_carry_them(dlrun_home):
    from matrix_catalog import matrix_plan

    from dlrun.errors import UsageError
    from dlrun.render import render_job

    plan = matrix_plan("singularity", "mpirun", "tcp", scheduler="kubernetes", env=["HF_TOKEN=x"])
    with pytest.raises(UsageError, match=r"scheduler kubernetes would carry the values of HF_TOKEN in its job "
                                         r"manifest; valid: a secret the site provides"):
        render_job(plan)


def test_secret_env_without_a_value_is_one_line(dlrun_home):
    proc = run_cli("plan", "trivial", "--secret-env", "DLRUN_TEST_UNSET_SECRET")
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("dlrun: error: --secret-env DLRUN_TEST_UNSET_SECRET: DLRUN_TEST_UNSET_SECRET is "
                                   "not set in dlrun's environment; valid: export DLRUN_TEST_UNSET_SECRET first, or "
                                   "--secret-env DLRUN_TEST_UNSET_SECRET=VALUE")


def test_secrets_travel_by_name_in_every_runtime_and_pbs_asks_for_them(dlrun_home):
    from matrix_catalog import matrix_plan

    from dlrun.render import render_job

    for runtime in ("host", "singularity", "apptainer", "docker", "podman", "docker-api", "charliecloud", "enroot"):
        launcher = "srun" if runtime == "enroot" else "mpirun"
        for scheduler in ("slurm", "lsf", "pbs"):
            if scheduler != "slurm" and launcher == "srun":
                continue
            plan = matrix_plan(runtime, launcher, "tcp", scheduler=scheduler, env=["HF_TOKEN=v4lue-xyz"])
            script = render_job(plan).script
            assert "v4lue-xyz" not in script, (runtime, scheduler)
            assert 'export HF_TOKEN="${HF_TOKEN}"' in script
            if scheduler == "pbs":
                assert "#PBS -v HF_TOKEN\n" in script
            if launcher == "mpirun":
                assert " -x HF_TOKEN " in script


# ------------------------------------------------------------------------- what the ranks print about them
PLANTED = "PLANTPORT55"


def _everywhere(root: Path, value: str) -> list[str]:
    """Every file under `root` (bundles unpacked, stores dumped) that holds `value`."""
    found = []
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
        data = path.read_bytes()
        if path.suffix == ".bundle":
            import gzip

            data = gzip.decompress(data)
        elif path.name.endswith(".sqlite"):
            data = "\n".join(sqlite3.connect(path).iterdump()).encode()
        if value.encode() in data:
            found.append(str(path))
    return found


@pytest.mark.mpi
def test_a_secret_the_ranks_print_is_written_nowhere(dlrun_home, tmp_path):
    """The audit's reproduction: MASTER_PORT marked secret with a value no rank can use, so both ranks fail
    printing it (`Port could not be cast to integer value as 'PLANTPORT55'`). The value went into the failure
    reason in the store and status.json, runs.jsonl in bundles and the logs they carry; now into nothing."""
    env = {"DLRUN_SITE": "site-s"}
    proc = run_cli("run", "trivial", "--ranks-per-node", "2", "--secret-env", f"MASTER_PORT={PLANTED}", "--steps", "1",
                   "--warmup-steps", "1", "--batch-size", "2", env=env)
    outputs = [proc.stdout, proc.stderr]
    assert proc.returncode == 1, proc.stderr
    [run] = json.loads(run_cli("results", "list", "--json", env=env).stdout)
    run_dir = Path(run["run_dir"])
    status = json.loads((run_dir / "status.json").read_text())
    assert run["status"] == "failed" and REDACTED in status["reason"]  # the ranks did print it: redacted
    logs = [p for p in [run_dir / "output.log", run_dir / "stderr.log", *run_dir.glob("logs/**/*")] if p.is_file()]
    assert any(REDACTED in p.read_text(errors="replace") for p in logs), "no rank log shows where the value was"
    out = tmp_path / "out"
    for command in (["results", "show", run["id"]], ["results", "show", run["id"], "--json"],
                    ["results", "export", "--out", str(out / "all.bundle"), "--with-logs"],
                    ["results", "export", "--out", str(out / "all.csv")],
                    ["results", "export", "--out", str(out / "all.jsonl")],
                    ["report", "--status", "failed", "--out", str(out / "report")], ["compare", "--status", "failed"]):
        shown = run_cli(*command, env=env)
        outputs += [shown.stdout, shown.stderr]
    assert (out / "all.bundle").is_file()
    assert [o for o in outputs if PLANTED in o] == []
    assert _everywhere(dlrun_home, PLANTED) == [] and _everywhere(out, PLANTED) == []


def test_a_secrets_value_under_another_name_is_a_secret(dlrun_home):
    """`--env COPY=<value of a secret>` was written into run.sh and dry-run scripts: the copy is rendered by
    reference too, whether the original is in the plan or only in dlrun's environment."""
    value = f"hf_{secrets.token_hex(8)}"
    for args, env in (([f"--env=HF_TOKEN={value}", f"--env=COPY={value}"], {}),
                      ([f"--env=COPY={value}"], {"MY_TOKEN": value})):
        script = run_cli("run", "trivial", *args, "--dry-run", env=env, check=True).stdout
        plan = run_cli("plan", "trivial", *args, env=env, check=True).stdout
        assert value not in script + plan
        assert 'export COPY="${COPY}"' in script and json.loads(plan)["env"]["COPY"] == REDACTED
    assert secret_names({"HF_TOKEN": value, "COPY": value, "OTHER": "x"}) == {"HF_TOKEN", "COPY"}
