"""Where dlrun finds its built-in files and keeps a site's state.

Built-in, read-only (shipped with the package): the catalogs `recipes/` and `containers/`, and the
in-container harness files. A wheel carries the catalogs inside the package (`dlrun/_builtin/`); an
editable install or a checkout reads them from the source tree's top level.

Site state, written by dlrun (never into the source tree or site-packages):
  `$DLRUN_HOME` (default `$XDG_DATA_HOME/dlrun`, i.e. `~/.local/share/dlrun`): run directories, the result
      store, the site's image lock (digests of the images this site built, pulled or loaded) and its
      image store (root filesystems, archives, SIF files);
  `$XDG_CACHE_HOME/dlrun` (default `~/.cache/dlrun`): reusable build inputs (bootstrapped Debian trees);
  `$XDG_CONFIG_HOME/dlrun` (default `~/.config/dlrun`): a site's own catalog entries, which dlrun only reads.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from dlrun.errors import UsageError

PACKAGE_DIR = Path(__file__).resolve().parent
#: The in-container harness files (standard library + framework only), bound or copied into images.
HARNESS_DIR = PACKAGE_DIR / "harness"
#: The harness files every framework's harness ships with: the shared helpers, the rank variables, and the
#: launcher/harness contract (harness_contract.py, harness_result_schema.py).
HARNESS_SHARED = ("harness_common.py", "harness_contract.py", "harness_node.py", "harness_ranks.py",
                  "harness_result_schema.py")
#: Where a wheel puts the built-in catalogs (see `[tool.hatch.build.targets.wheel.force-include]`).
SHIPPED_DIR = PACKAGE_DIR / "_builtin"


def harness_files(framework: str = "pytorch") -> list[Path]:
    """The files of a framework's in-container harness, read from the harness directory: the entry
    `harness_<framework>.py` first, then in name order the shared HARNESS_SHARED
    and the entry's siblings `harness_<framework>_*.py`. Shipped, bound and hashed together; empty for a framework that has
    no dlrun harness (TensorFlow 1.x images run tf_cnn_benchmarks)."""
    entry = HARNESS_DIR / f"harness_{framework}.py"
    if not entry.is_file():
        return []
    shared = [HARNESS_DIR / name for name in HARNESS_SHARED]
    return [entry, *sorted([*shared, *HARNESS_DIR.glob(f"harness_{framework}_*.py")])]


def harness_hashes(harness_dir: Path, framework: str) -> tuple[str | None, dict[str, str | None]]:
    """(digest, per-file sha256) of a framework's harness files as they lie in `harness_dir`. The digest is
    the sha256 of their `sha256sum` listing in name order, so one value names the whole harness and
    `cd DIR && LC_ALL=C sha256sum harness_common.py harness_contract.py harness_node.py harness_pytorch*.py harness_ranks.py
    harness_result_schema.py | sha256sum`
    recomputes it; None when a file is missing or the framework has no harness."""
    files = {path.name: _file_sha256(harness_dir / path.name) for path in harness_files(framework)}
    if not files or None in files.values():
        return None, files
    listing = "".join(f"{digest}  {name}\n" for name, digest in sorted(files.items()))
    return hashlib.sha256(listing.encode()).hexdigest(), files


def _file_sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def source_root() -> Path | None:
    """The source tree this package runs from (a checkout or an editable install), else None."""
    root = PACKAGE_DIR.parents[1]
    return root if (root / "pyproject.toml").is_file() and (root / "recipes").is_dir() else None


def builtin_root() -> Path:
    """The directory holding the built-in `recipes/` and `containers/`."""
    if SHIPPED_DIR.is_dir():
        return SHIPPED_DIR
    root = source_root()
    if root is None:
        raise RuntimeError(f"dlrun's built-in catalogs are missing: neither {SHIPPED_DIR} nor a source tree "
                           "above the package; reinstall dlrun")
    return root


def dlrun_home() -> Path:
    """Absolute, so that the run directories exported to the ranks (which start elsewhere) mean the same."""
    if os.environ.get("DLRUN_HOME"):
        return Path(os.path.abspath(os.path.expanduser(os.environ["DLRUN_HOME"])))
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(os.path.abspath(data_home)) / "dlrun"


def private_dir(path: Path) -> Path:
    """`path` as a directory only its owner can enter (0700 for what dlrun creates), or the one-line error
    that names it: run directories and the store hold command lines, logs and provenance."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not os.access(path, os.W_OK | os.X_OK):
            raise PermissionError(13, "Permission denied")
    except OSError as exc:
        from dlrun.files import file_system_error

        problem = file_system_error(path, exc if exc.errno not in (None, 13) else None)
        if problem is not None:  # full or read-only: which file system, and what to do
            raise problem from None
        where = "DLRUN_HOME" if os.environ.get("DLRUN_HOME") else "the dlrun home (set DLRUN_HOME to move it)"
        raise UsageError(f"cannot use {str(path)!r} under {where}: {exc.strerror or exc}; valid: a writable "
                         "directory, e.g. DLRUN_HOME=~/.local/share/dlrun") from None
    return path


def config_home() -> Path:
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "dlrun"


def cache_home() -> Path:
    if os.environ.get("DLRUN_CACHE_DIR"):
        return Path(os.environ["DLRUN_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dlrun"


#: Where tuning trials run (one `trial-*` folder each, locked while its trial lives: dlrun.tune.trial).
TUNE_TRIALS = "tune-trials"
#: A run directory is created as `runs/.staging-<id>` and renamed to `runs/<id>` once stored.
STAGING_PREFIX = ".staging-"


def runs_dir() -> Path:
    return dlrun_home() / "runs"


def staging_dirs(runs_root: Path) -> list[Path]:
    """Run directories not yet published (running, or left by a dlrun that died)."""
    return sorted(runs_root.glob(STAGING_PREFIX + "*")) if runs_root.is_dir() else []


def store_path() -> Path:
    return dlrun_home() / "results.sqlite"
