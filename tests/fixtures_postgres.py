"""Session fixture for a real PostgreSQL server: Debian's `postgresql` (its `initdb` and `postgres`), a cluster in
the session's temporary folder, listening on a free loopback port only, a test role that logs in with a
password (scram-sha-256), stopped when the session ends.

PostgreSQL refuses to run as root, and the tests run as root in CI: the cluster then belongs to the `postgres`
user Debian's package creates, and its programs run as that user (`runuser`). Each test that asks for a
PostgreSQL store gets a database of its own (`postgres_url`).
"""
from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from fixtures_registry import free_port

ROLE, PASSWORD = "dlrun_test", "pw-Xq7rT-test"
_DATABASES = itertools.count()


def _bin_dir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        pytest.fail("the PostgreSQL store tests need Debian's postgresql (apt-get install postgresql; `make sysdeps` "
                    "installs it)", pytrace=False)
    return Path(found[-1]).parent


def _as_owner(argv: list[str]) -> list[str]:
    """`argv` run as the cluster's owner: this user, or `postgres` when this is root."""
    if os.getuid() != 0:
        return argv
    return ["runuser", "-u", "postgres", "--", *argv]


def _superuser_sql(bin_dir: Path, port: int, sql: str) -> None:
    owner = "postgres" if os.getuid() == 0 else pwd.getpwuid(os.getuid()).pw_name
    subprocess.run(_as_owner([str(bin_dir / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1",
                              "-p", str(port), "-U", owner, "-d", "postgres", "-c", sql]),
                   check=True, capture_output=True, text=True, env={**os.environ, "PGPASSWORD": ""})


def _ready(bin_dir: Path, port: int) -> bool:
    return subprocess.run([str(bin_dir / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(port)],
                          check=False).returncode == 0


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory):
    """{"host", "port", "role", "password", "bin": the server's programs, "admin": run SQL as its superuser}."""
    bin_dir = _bin_dir()
    if shutil.which("psql") is None and not (bin_dir / "psql").exists():
        pytest.fail("psql is missing (apt-get install postgresql-client)", pytrace=False)
    # root's pytest folders are private to root: the cluster's owner must reach its folder, so it is made apart
    work = Path(tempfile.mkdtemp(prefix="dlrun-postgres-")) if os.getuid() == 0 else tmp_path_factory.mktemp("pg")
    data = work / "data"
    if os.getuid() == 0:
        os.chmod(work, 0o755)
        data.mkdir(mode=0o700)
        shutil.chown(data, "postgres", "postgres")
        shutil.chown(work, "postgres", "postgres")
    # the superuser logs in over loopback without a password (trust, for the owner alone); the test role by
    # scram-sha-256 only
    owner = "postgres" if os.getuid() == 0 else pwd.getpwuid(os.getuid()).pw_name
    subprocess.run(_as_owner([str(bin_dir / "initdb"), "-D", str(data), "-U", owner, "--auth-local=trust",
                              "--auth-host=scram-sha-256", "--encoding=UTF8", "--locale=C.UTF-8"]),
                   check=True, capture_output=True, text=True)
    hba = data / "pg_hba.conf"
    rules = f"host all {owner} 127.0.0.1/32 trust\nhost all all 127.0.0.1/32 scram-sha-256\n"
    subprocess.run(_as_owner(["sh", "-c", f"printf '%s' '{rules}' > {hba}"]), check=True)
    log = work / "postgres.log"
    for _attempt in range(5):  # another process may take the free port between the probe and the bind
        port = free_port()
        proc = subprocess.Popen(_as_owner([str(bin_dir / "postgres"), "-D", str(data), "-p", str(port),
                                           "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={work}",
                                           "-c", "max_connections=200", "-c", "fsync=off"]),
                                stdout=open(log, "ab"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        deadline = time.monotonic() + 60
        while proc.poll() is None and not _ready(bin_dir, port) and time.monotonic() < deadline:
            time.sleep(0.1)
        if proc.poll() is None and _ready(bin_dir, port):
            break
        proc.kill()
        proc.wait()
    else:
        pytest.fail(f"postgres did not start: {log.read_text()[-2000:]}", pytrace=False)
    try:
        _superuser_sql(bin_dir, port, f"CREATE ROLE {ROLE} LOGIN CREATEDB PASSWORD '{PASSWORD}'")
        yield {"host": "127.0.0.1", "port": port, "role": ROLE, "password": PASSWORD, "bin": bin_dir,
               "admin": lambda sql: _superuser_sql(bin_dir, port, sql), "log": log}
    finally:
        # fast shutdown: a connection a failed test left open does not hold the session's end
        subprocess.run(_as_owner([str(bin_dir / "pg_ctl"), "stop", "-D", str(data), "-m", "fast", "-w"]),
                       check=False, capture_output=True)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if os.getuid() == 0:
            shutil.rmtree(work, ignore_errors=True)


def new_database(server: dict) -> str:
    """The URL of a new, empty database of the test role (password in the URL, as a site's config may hold it)."""
    name = f"dlrun_{os.getpid()}_{next(_DATABASES)}"
    server["admin"](f"CREATE DATABASE {name} OWNER {ROLE}")
    return f"postgresql://{ROLE}:{PASSWORD}@{server['host']}:{server['port']}/{name}"


@pytest.fixture
def postgres_url(postgres_server):
    """A new, empty database's URL (new_database)."""
    return new_database(postgres_server)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_location(request, tmp_path):
    """Where a test's store is, once on each backend: a new SQLite file, or a new database on the session's
    PostgreSQL server (its URL, password included, as config.yaml may give it)."""
    if request.param == "sqlite":
        return tmp_path / "results.sqlite"
    return request.getfixturevalue("postgres_url")
