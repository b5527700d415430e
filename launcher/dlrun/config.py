"""dlrun's configuration file, read in one place: `config.yaml` under `$XDG_CONFIG_HOME/dlrun` (default
`~/.config/dlrun/config.yaml`). Keys, each read by the module that uses it:

  site: NAME                 this site's name (dlrun.results.site)
  system: NAME               the system a run uses when `--system` and `$DLRUN_SYSTEM` name none
  allowed_signers: PATH      whose signed bundles `dlrun results import` accepts (relative to this file)
  store: postgresql://USER@HOST[:PORT]/DATABASE
                             the site's shared result store (dlrun.results.store.location); none: the SQLite
                             file under $DLRUN_HOME
  references: {SYSTEM: [...]}  the site's own references per system that `dlrun check` judges runs against
                             (dlrun.gate.site_references)
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from dlrun.errors import DlrunError, UsageError
from dlrun.paths import config_home


def config_file() -> Path:
    return config_home() / "config.yaml"


def site_config() -> dict[str, Any]:
    """The file's keys ({} when there is no file); one line naming the file when it cannot be read."""
    path = config_file()
    if not path.is_file():
        return {}
    from dlrun.yamlfile import load_yaml

    try:
        data = load_yaml(path, "the configuration file")
    except (OSError, DlrunError) as exc:
        raise UsageError(f"cannot read {path}: {str(exc).splitlines()[0]}; valid: a YAML mapping such as "
                         "`site: NAME`") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(f"{path} holds {type(data).__name__}, not keys; valid: a YAML mapping such as `site: NAME`")
    return data


def config_path(key: str) -> Path | None:
    """A path-valued key, relative to the file's directory (`~` expanded); None when not set."""
    value = site_config().get(key)
    if value is None:
        return None
    import os

    return (config_file().parent / os.path.expanduser(str(value))).resolve()
