"""The name of this site, recorded with every run it stores, so that results shared between sites say
where each one came from.

First found wins:
  1. `$DLRUN_SITE`;
  2. `site: NAME` in `config.yaml` under dlrun's configuration directory (`$XDG_CONFIG_HOME/dlrun`,
     default `~/.config/dlrun/config.yaml`; other keys in that file are left to whoever reads them);
  3. the domain of this host's name (`node7.cluster.example.org` -> `cluster.example.org`), taken from the
     name alone, without a DNS query that could hang on a badly configured node;
  4. `local`.
"""
from __future__ import annotations

import os
import re
import socket

from dlrun.config import config_file, site_config
from dlrun.errors import UsageError

SITE_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,99}$")
DEFAULT_SITE = "local"


def _checked(name: str, where: str) -> str:
    if not SITE_PATTERN.match(name):
        raise UsageError(f"bad site name {name!r} in {where}; valid: letters, digits and . _ + - "
                         "(starting with a letter or digit, at most 100 characters)")
    return name


def _from_config() -> str | None:
    site = site_config().get("site")
    return None if site is None else _checked(str(site), f"{config_file()} (key `site`)")


def host_domain(hostname: str) -> str | None:
    """The domain part of a host name, if it has one worth naming a site after."""
    _, dot, domain = hostname.strip().rstrip(".").partition(".")
    if not dot or not domain or domain in ("localdomain", "local", "localhost") or not SITE_PATTERN.match(domain):
        return None
    return domain


def local_site() -> str:
    """This site's name (see the module notes for where it comes from)."""
    env = os.environ.get("DLRUN_SITE")
    if env:
        return _checked(env, "$DLRUN_SITE")
    return _from_config() or host_domain(socket.gethostname()) or DEFAULT_SITE
