"""Which result store a command opens: the SQLite file under `$DLRUN_HOME` (the embedded default), or the site's
shared PostgreSQL database that `store: postgresql://USER@HOST[:PORT]/DATABASE` in config.yaml names.

A site where several people and login nodes write results needs one store they all reach; SQLite on a shared
file system (NFS, Lustre, GPFS) is where its locking fails. The database's password is a secret: it comes from
libpq's own places (`PGPASSWORD`, `~/.pgpass`, `PGPASSFILE`) or from the URL, and a `PostgresUrl` prints as its
URL with the password redacted, so it never reaches the terminal, a file, a row or an error message.
"""
from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

from dlrun.errors import UsageError
from dlrun.secrets import REDACTED, redact_text, redact_url_passwords

SCHEMES = ("postgresql", "postgres")
VALID = ("valid: postgresql://USER@HOST[:PORT]/DATABASE (its password in PGPASSWORD, ~/.pgpass or the URL), or "
         "no `store:` for the SQLite file under DLRUN_HOME")


@dataclass(frozen=True)
class PostgresUrl:
    """A PostgreSQL store's URL as configured (password included); str() and repr() redact the password."""

    url: str

    def __str__(self) -> str:
        text = redact_url_passwords(self.url, whole=True)
        return redact_text(text, [self.password]) if self.password else text

    def __repr__(self) -> str:
        return f"PostgresUrl({str(self)!r})"

    @property
    def password(self) -> str | None:
        password = urllib.parse.urlsplit(self.url).password
        return urllib.parse.unquote(password) if password else None

    def redact(self, text: str) -> str:
        """`text` (a server's or libpq's message) without this URL's password in any form."""
        text = redact_url_passwords(text)
        if self.password:
            text = redact_text(text, [self.password])
            text = text.replace(self.password, REDACTED)  # however short it is
        return text

    def exists(self) -> bool:
        """A server store always may hold runs (as `Path.exists` tells of a store file)."""
        return True


#: What a Store is opened on: the SQLite file, or a PostgreSQL store's URL (as a PostgresUrl or its text).
Location = Union[Path, str, PostgresUrl]


def is_postgres(value: Any) -> bool:
    return isinstance(value, PostgresUrl) or (isinstance(value, str) and value.split("://", 1)[0] in SCHEMES
                                              and "://" in value)


def parse_store(value: Any, where: str = "config.yaml") -> PostgresUrl:
    """`store:`'s value as a PostgresUrl; a UsageError naming the value (password redacted) and what is valid."""
    shown = redact_url_passwords(str(value), whole=True)
    if not isinstance(value, str) or "://" not in value:
        raise UsageError(f"bad store {shown!r} in {where}: not a URL; {VALID}")
    parts = urllib.parse.urlsplit(value)
    why = None
    if parts.scheme not in SCHEMES:
        why = f"the scheme {parts.scheme!r} is not postgresql"
    else:
        try:
            parts.port  # noqa: B018 - raises ValueError for a port that is not a number
        except ValueError:
            why = "the port is not a number from 1 to 65535"
        name = urllib.parse.unquote(parts.path.lstrip("/"))
        if why is None and (not name or "/" in name):
            why = "no database name after the host" if not name else f"{name!r} is not a database name"
    if why:
        url = PostgresUrl(value)
        raise UsageError(f"bad store {url.redact(shown)!r} in {where}: {why}; {VALID}")
    return PostgresUrl(value)


def store_location() -> Path | PostgresUrl:
    """The store this dlrun opens: config.yaml's `store:` where set, else `$DLRUN_HOME/results.sqlite`."""
    from dlrun.config import config_file, site_config
    from dlrun.paths import store_path

    value = site_config().get("store")
    if value is None:
        return store_path()
    return parse_store(value, str(config_file()))
