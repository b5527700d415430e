"""Session fixture for a real PostgreSQL server (tests/pg_cluster.py: Debian's `postgresql`, a cluster in a
temporary folder, listening on a free loopback port only, a test role that logs in with a password), stopped when
the session ends. Each test that asks for a PostgreSQL store gets a database of its own (`postgres_url`).
"""
from __future__ import annotations

import pytest

from pg_cluster import PASSWORD, ROLE, ClusterError, cluster, new_database

__all__ = ["PASSWORD", "ROLE", "new_database", "postgres_server", "postgres_url", "store_location"]


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory):
    """{"host", "port", "role", "password", "bin": the server's programs, "admin": run SQL as its superuser}."""
    try:
        with cluster(tmp_path_factory.mktemp("pg")) as server:
            yield server
    except ClusterError as exc:
        pytest.fail(str(exc), pytrace=False)


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
