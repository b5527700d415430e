"""Hostile bundles against the real `dlrun results import`, each in a child process held to a memory ceiling
(RLIMIT_AS, MEMORY_CEILING) and a CPU fence (RLIMIT_CPU): a tar header announcing a gigabyte, a 128 MiB
manifest, a runs.jsonl of newlines, zero padding after the archive's end, a site that requires signatures
and an unsigned manifest that would be costly to parse, a FIFO, and an import killed by SIGKILL whose
leftovers the next command removes. Every one ends in one line and stores nothing.

The bombs are written as a stream (a few MB on disk each) by `_bundle`, from tar headers made here: the
point is what they announce, which tarfile's own writer would never produce."""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import resource
import signal
import sqlite3
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from bundle_data import allowed_signers, filled_store, make_key

from dlrun.results.exchange.export import export_bundle
from dlrun.results.store.query import Filters

#: What one import may take: the interpreter with dlrun's modules loaded takes about 45 MiB of address space
#: (VmPeak); the largest manifest the default limits let through is 16 MiB, parsed within the container budget.
MEMORY_CEILING = 512 << 20
CPU_FENCE_S = 60
MIB = 1 << 20


def _header(name: str, size: int, kind: bytes = tarfile.REGTYPE) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.type = size, kind
    return info.tobuf(format=tarfile.USTAR_FORMAT)


def _bundle(path: Path, *pieces) -> Path:
    """A gzip file of `pieces`: bytes as they are, an int as that many zero bytes (compressed as they
    stream, so a GiB costs about a MB on disk)."""
    zeros = bytes(MIB)
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, compresslevel=9) as packed:
        for piece in pieces:
            if isinstance(piece, int):
                for start in range(0, piece, MIB):
                    packed.write(zeros[:min(MIB, piece - start)])
            else:
                packed.write(piece)
    return path


def _pad(data: bytes) -> bytes:
    return data + bytes(-len(data) % 512)


def _manifest(files: dict[str, tuple[str, int]], runs: int = 1) -> bytes:
    return json.dumps({"format": "dlrun-results-bundle", "format_version": 1, "site": "site-x",
                       "dlrun_version": "0", "created_at": None, "filters": {}, "runs": runs, "with_logs": False,
                       "files": {name: {"sha256": sha, "size": size} for name, (sha, size) in files.items()}}).encode()


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CEILING, MEMORY_CEILING))
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_FENCE_S, CPU_FENCE_S))


def _import(home: Path, bundle: Path, *options: str, config: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "DLRUN_HOME": str(home), "XDG_CONFIG_HOME": str(config or home.parent / "no-config"),
           "DLRUN_SITE": "site-here"}
    return subprocess.run([sys.executable, "-m", "dlrun.cli", "results", "import", str(bundle), *options],
                          capture_output=True, text=True, env=env, preexec_fn=_limited, timeout=CPU_FENCE_S * 3)


def _refused(proc: subprocess.CompletedProcess, home: Path, *words: str) -> str:
    """The import ended with one line (exit 1 or 2) holding `words`, within the ceiling, and stored nothing."""
    assert proc.returncode in (1, 2), proc.stderr[-2000:]
    assert proc.stdout == "" and proc.stderr.startswith("dlrun: error: ") and proc.stderr.count("\n") == 1, \
        proc.stderr[-2000:]
    for word in words:
        assert word in proc.stderr, proc.stderr
    store = home / "results.sqlite"
    if store.exists():
        assert sqlite3.connect(store).execute("SELECT count(*) FROM runs").fetchone()[0] == 0
    leftovers = list((home / "imported").iterdir()) if (home / "imported").is_dir() else []
    assert leftovers == [], leftovers
    return proc.stderr


@pytest.mark.parametrize("kind, what", [(tarfile.XHDTYPE, "'x'"), (tarfile.GNUTYPE_LONGNAME, "'L'")],
                         ids=["pax", "gnu-longname"])
def test_a_gigabyte_tar_header_is_refused_before_it_is_read(tmp_path, kind, what):
    """The audit's 1 MB bundle whose first header announces 1 GiB (3.2 GB of memory for 20 s before)."""
    bomb = _bundle(tmp_path / "header.bundle", _header("././@LongHeader", 1 << 30, kind), 1 << 30)
    assert bomb.stat().st_size < 2 * MIB
    _refused(_import(tmp_path / "home", bomb, "--unsigned"), tmp_path / "home",
             f"a tar header (type {what}) of 1,073,741,824 bytes, more than 64 KiB (limits.tar_header_bytes)")


def test_a_128_mib_manifest_is_refused_before_it_is_read(tmp_path):
    """The audit's 130 KB bundle with a 128 MB manifest.json (3.4 GB of memory before)."""
    body = b"[" + b"{}," * ((128 * MIB - 2) // 3)
    body = body[:128 * MIB - 1] + b"]"
    bomb = _bundle(tmp_path / "manifest.bundle", _header("manifest.json", len(body)), _pad(body), 1024)
    _refused(_import(tmp_path / "home", bomb, "--unsigned"), tmp_path / "home",
             "member 'manifest.json' is 134,217,728 bytes, more than a bundle carries (16 MiB, limits.manifest_bytes)")


def test_a_runs_file_of_newlines_is_refused_at_its_first_line(tmp_path):
    """The audit's 261 KB runs.jsonl of newlines (2.3 GB of memory before)."""
    size = 270 * MIB
    manifest = _manifest({"runs.jsonl": ("0" * 64, size)})
    bomb = _bundle(tmp_path / "newlines.bundle", _header("manifest.json", len(manifest)), _pad(manifest),
                   _header("runs.jsonl", size), b"\n" * size, 1024)
    _refused(_import(tmp_path / "home", bomb, "--unsigned"), tmp_path / "home", "runs.jsonl line 1 is not JSON")


def _tar_of(bundle: Path) -> bytes:
    with gzip.open(bundle) as packed:
        return packed.read()


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("bombs")
    out = root / "good.bundle"
    export_bundle(filled_store(root / "a"), Filters(), out, site="site-a", dlrun_version="0", with_logs=True)
    return out


def test_zero_padding_after_the_archive_is_bounded(tmp_path, good):
    """The audit's 17 MB bundle of zeros after the tar end (inflated up to 16 GiB, 140 s of CPU, imported)."""
    tar = _tar_of(good)
    bomb = _bundle(tmp_path / "padded.bundle", tar, 64 * MIB)
    _refused(_import(tmp_path / "home", bomb, "--unsigned"), tmp_path / "home",
             "more than 1 MiB of padding after the end of the archive (limits.padding_bytes)")
    # what tar itself pads with (a record of 10 KiB, and a little more) is still a bundle
    proc = _import(tmp_path / "home", _bundle(tmp_path / "ok.bundle", tar, 64 * 1024), "--unsigned")
    assert proc.returncode == 0 and proc.stdout.startswith("imported 3 of 3 runs"), proc.stderr


def test_the_limits_are_the_sites_to_set(tmp_path, good):
    config = tmp_path / "config"
    (config / "dlrun").mkdir(parents=True)
    (config / "dlrun" / "config.yaml").write_text("limits:\n  runs_bytes: 4 KiB\n")
    _refused(_import(tmp_path / "home", good, "--unsigned", config=config), tmp_path / "home",
             "more than a bundle carries (4 KiB, limits.runs_bytes)")
    (config / "dlrun" / "config.yaml").write_text("limits:\n  runs_bytes: lots\n")
    assert "limits.runs_bytes: 'lots' is not a size; valid: a positive number of bytes, or N KiB" in \
        _refused(_import(tmp_path / "home", good, "--unsigned", config=config), tmp_path / "home")


def test_a_site_that_requires_signatures_parses_nothing_unsigned(tmp_path):
    """A manifest that would be costly to parse, unsigned, at a site that names its allowed signers: refused for
    the missing signature before its JSON is read (the audit found the memory spent before the check)."""
    key = make_key(tmp_path / "keys", "ops")
    config = tmp_path / "config"
    (config / "dlrun").mkdir(parents=True)
    signers = allowed_signers(tmp_path / "allowed_signers", {"ops@site-x": key})
    (config / "dlrun" / "config.yaml").write_text(f"allowed_signers: {signers}\n")
    body = b"[" + b"{}," * (5 * MIB) + b"{}]"
    bomb = _bundle(tmp_path / "unsigned.bundle", _header("manifest.json", len(body)), _pad(body), 1024)
    error = _refused(_import(tmp_path / "home", bomb, "--unsigned", config=config), tmp_path / "home",
                     "is not signed, and this site accepts only bundles signed by", "--unsigned does not lift it")
    assert "JSON" not in error


def test_a_fifo_is_refused_instead_of_waited_on(tmp_path):
    fifo = tmp_path / "bundle.fifo"
    os.mkfifo(fifo)
    _refused(_import(tmp_path / "home", fifo, "--unsigned"), tmp_path / "home",
             f"bundle '{fifo}' is a FIFO, not a regular file; valid: a file")


KILLED_IMPORT = """
import os, signal, sys
from pathlib import Path
from dlrun.results.exchange import bundle_import
from dlrun.results.store import Store

real = bundle_import.read_bundle

def killed(path, *, staging, **kwargs):
    real(path, staging=staging, **kwargs)  # the bundle is read into staging: then the import is killed
    os.kill(os.getpid(), signal.SIGKILL)

bundle_import.read_bundle = killed
home = Path(sys.argv[2])
bundle_import.import_bundle(Store(home / "results.sqlite"), Path(sys.argv[1]), home, unsigned=True)
"""


def test_what_a_killed_import_leaves_is_removed_by_the_next_command(tmp_path, good):
    home = tmp_path / "home"
    env = {**os.environ, "DLRUN_HOME": str(home), "XDG_CONFIG_HOME": str(tmp_path / "config"),
           "DLRUN_SITE": "site-here"}
    proc = subprocess.run([sys.executable, "-c", KILLED_IMPORT, str(good), str(home)], env=env, timeout=120)
    assert proc.returncode == -signal.SIGKILL
    [staging] = [p for p in (home / "imported").iterdir() if p.is_dir()]
    assert staging.name.startswith(".staging-") and any(p.is_file() for p in staging.rglob("*"))
    # an import that is still running keeps its staging directory: its lock is held (here, by this test)
    live = home / "imported" / ".staging-live"
    live.mkdir()
    fd = os.open(home / "imported" / ".staging-live.lock", os.O_RDWR | os.O_CREAT, 0o600)
    import fcntl

    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        listed = subprocess.run([sys.executable, "-m", "dlrun.cli", "results", "list", "--json"], env=env,
                                capture_output=True, text=True, timeout=120)
        assert listed.returncode == 0 and json.loads(listed.stdout) == [], listed.stderr
        assert sorted(p.name for p in (home / "imported").iterdir()) == [".staging-live", ".staging-live.lock"]
    finally:
        os.close(fd)


def test_json_with_nan_in_a_run_is_refused(tmp_path, good):
    """Non-finite numbers are not JSON: a bundle row holding one anywhere (bare NaN, or 1e999, which Python
    reads as infinity), here in an extra field of a result row, is refused (it was stored, and `results show
    --json` then printed invalid JSON)."""
    with tarfile.open(fileobj=io.BytesIO(_tar_of(good))) as archive:
        lines = archive.extractfile("runs.jsonl").read().splitlines()
    record = json.loads(lines[0])
    record["results"][0]["spread"] = "VALUE"
    for bad, word in ((b"NaN", "is not JSON"), (b"1e999", "not finite")):
        line = json.dumps(record).encode().replace(b'"VALUE"', bad)
        runs = b"\n".join([line, *lines[1:]]) + b"\n"
        manifest = _manifest({"runs.jsonl": (hashlib.sha256(runs).hexdigest(), len(runs))}, runs=len(lines))
        bomb = _bundle(tmp_path / "nan.bundle", _header("manifest.json", len(manifest)), _pad(manifest),
                       _header("runs.jsonl", len(runs)), _pad(runs), 1024)
        _refused(_import(tmp_path / "home", bomb, "--unsigned"), tmp_path / "home", "runs.jsonl line 1", word)
