"""A real PostgreSQL server for the tests and the benchmarks: Debian's `postgresql` (its `initdb` and `postgres`), a
cluster in a temporary folder, listening on a free loopback port only, a role that logs in with a password
(scram-sha-256), stopped with pg_ctl's fast shutdown.

PostgreSQL refuses to run as root, and the tests run as root in CI: the cluster then belongs to the `postgres`
user Debian's package creates, and its programs run as that user (`runuser`). Plain functions, no pytest:
tests/fixtures_postgres.py makes them session fixtures, bench/compare_store.py runs benchmark 7 on a cluster.
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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from loopback import free_port

ROLE, PASSWORD = "dlrun_test", "pw-Xq7rT-test"
_DATABASES = itertools.count()


class ClusterError(RuntimeError):
    """The server could not be made or started (its message says what to install or what the server said)."""


def bin_dir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        raise ClusterError("the PostgreSQL store tests need Debian's postgresql (apt-get install postgresql; "
                           "`make sysdeps` installs it)")
    return Path(found[-1]).parent


def _owner() -> str:
    return "postgres" if os.getuid() == 0 else pwd.getpwuid(os.getuid()).pw_name


def _as_owner(argv: list[str]) -> list[str]:
    """`argv` run as the cluster's owner: this user, or `postgres` when this is root."""
    return argv if os.getuid() != 0 else ["runuser", "-u", "postgres", "--", *argv]


def _superuser_sql(programs: Path, port: int, sql: str) -> None:
    subprocess.run(_as_owner([str(programs / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1",
                              "-p", str(port), "-U", _owner(), "-d", "postgres", "-c", sql]),
                   check=True, capture_output=True, text=True, env={**os.environ, "PGPASSWORD": ""})


def _ready(programs: Path, port: int) -> bool:
    return subprocess.run([str(programs / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(port)],
                          check=False).returncode == 0


def _init(programs: Path, work: Path) -> Path:
    """The cluster's data folder, owned by its owner; the superuser logs in over loopback without a password
    (trust, for the owner alone), every other role by scram-sha-256 only."""
    data = work / "data"
    if os.getuid() == 0:
        os.chmod(work, 0o755)
        data.mkdir(mode=0o700)
        shutil.chown(data, "postgres", "postgres")
        shutil.chown(work, "postgres", "postgres")
    subprocess.run(_as_owner([str(programs / "initdb"), "-D", str(data), "-U", _owner(), "--auth-local=trust",
                              "--auth-host=scram-sha-256", "--encoding=UTF8", "--locale=C.UTF-8"]),
                   check=True, capture_output=True, text=True)
    rules = f"host all {_owner()} 127.0.0.1/32 trust\nhost all all 127.0.0.1/32 scram-sha-256\n"
    subprocess.run(_as_owner(["sh", "-c", f"printf '%s' '{rules}' > {data / 'pg_hba.conf'}"]), check=True)
    return data


def _start(programs: Path, work: Path, data: Path, log: Path) -> tuple[subprocess.Popen, int]:
    for _attempt in range(5):  # another process may take the free port between the probe and the bind
        port = free_port()
        proc = subprocess.Popen(_as_owner([str(programs / "postgres"), "-D", str(data), "-p", str(port),
                                           "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={work}",
                                           "-c", "max_connections=200", "-c", "fsync=off"]),
                                stdout=open(log, "ab"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        deadline = time.monotonic() + 60
        while proc.poll() is None and not _ready(programs, port) and time.monotonic() < deadline:
            time.sleep(0.1)
        if proc.poll() is None and _ready(programs, port):
            return proc, port
        proc.kill()
        proc.wait()
    raise ClusterError(f"postgres did not start: {log.read_text()[-2000:]}")


def _stop(programs: Path, data: Path, proc: subprocess.Popen) -> None:
    # fast shutdown: a connection a failed test left open does not hold the end
    subprocess.run(_as_owner([str(programs / "pg_ctl"), "stop", "-D", str(data), "-m", "fast", "-w"]),
                   check=False, capture_output=True)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextmanager
def cluster(work: Path | None = None) -> Iterator[dict]:
    """A running server: {"host", "port", "role", "password", "bin": its programs, "admin": run SQL as its
    superuser, "log"}. Root's folders are private to root, so as root the cluster is made in a folder of its own
    that its owner can reach (and removed after)."""
    programs = bin_dir()
    if shutil.which("psql") is None and not (programs / "psql").exists():
        raise ClusterError("psql is missing (apt-get install postgresql-client)")
    work = Path(tempfile.mkdtemp(prefix="dlrun-postgres-")) if os.getuid() == 0 or work is None else work
    data = _init(programs, work)
    log = work / "postgres.log"
    proc, port = _start(programs, work, data, log)
    try:
        _superuser_sql(programs, port, f"CREATE ROLE {ROLE} LOGIN CREATEDB PASSWORD '{PASSWORD}'")
        yield {"host": "127.0.0.1", "port": port, "role": ROLE, "password": PASSWORD, "bin": programs,
               "admin": lambda sql: _superuser_sql(programs, port, sql), "log": log}
    finally:
        _stop(programs, data, proc)
        if os.getuid() == 0:
            shutil.rmtree(work, ignore_errors=True)


def new_database(server: dict) -> str:
    """The URL of a new, empty database of the role (password in the URL, as a site's config may hold it)."""
    name = f"dlrun_{os.getpid()}_{next(_DATABASES)}"
    server["admin"](f"CREATE DATABASE {name} OWNER {ROLE}")
    return f"postgresql://{ROLE}:{PASSWORD}@{server['host']}:{server['port']}/{name}"
