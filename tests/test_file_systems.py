"""The store and the run directories on real file systems that refuse writes (issue 36, breaks 6, 7 and 12):
tmpfs mounts made for each test (as root), remounted read-only or filled up.

- A store on a read-only file system (an archived or shared store) is listed, shown, compared, reported and
  exported; SQLite cannot create its -shm file there, so it is opened immutable (nothing can change a file
  there). Every write says, in one line, that the file system is read-only and which it is.
- A full disk is one line naming the file system and what is free, never a traceback, for a run that fills
  it after its job printed its result, and for every command once nothing is free; nothing is left
  half-written, and once space is freed the run that filled it is stored with its result.
- A store damaged past its header and tables is refused before a job starts (SQLite's quick check).
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from bundle_data import LOGS, filled_store
from conftest import run_cli

from dlrun.results.store import Store

RESULT = 'echo "DLRUN_RESULT {\\"metric\\": \\"throughput\\", \\"value\\": 5, \\"unit\\": \\"images/sec\\"}"'
WORKLOADS = [
    {"name": "fast", "kind": "command", "description": "a result at once", "result": {"format": "dlrun-result"},
     "command": f'touch "$DLRUN_RUN_DIR/../../ran-{{name}}"; {RESULT}'.replace("{name}", "fast")},
    # prints its result, then fills the file system that holds DLRUN_HOME
    {"name": "filler", "kind": "command", "description": "fills the disk after its result",
     "result": {"format": "dlrun-result"},
     "command": f'{RESULT}; head -c 1000000000 /dev/zero > "$DLRUN_RUN_DIR/../../filler"; true'},
]


@pytest.fixture
def tmpfs(tmp_path):
    """mount(name, size) -> a fresh tmpfs mount under tmp_path, unmounted at the end."""
    if os.geteuid() != 0:
        pytest.fail("these tests mount tmpfs file systems, which needs root; run the tests as root")
    mounted: list[Path] = []

    def mount(name: str, size: str) -> Path:
        path = tmp_path / name
        path.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)], check=True)
        mounted.append(path)
        return path

    yield mount
    for path in reversed(mounted):
        subprocess.run(["umount", "-l", str(path)], check=False)


@pytest.fixture
def site(tmp_path) -> dict[str, str]:
    workloads = tmp_path / "site" / "workloads"
    workloads.mkdir(parents=True)
    (workloads / "audit.yaml").write_text(json.dumps(WORKLOADS))
    return {"DLRUN_PATH": str(tmp_path / "site"), "XDG_CONFIG_HOME": str(tmp_path / "xdg"), "DLRUN_SITE": "site-a"}


def _one_line(proc, *words: str) -> str:
    """The command failed with one line on stderr (nothing on stdout but what it printed before) naming
    `words`."""
    assert proc.returncode == 1, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dlrun: error: "), proc.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def _ok(proc) -> str:
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout


def test_a_read_only_store_is_read_and_every_write_says_why_not(tmp_path, tmpfs, site):
    mount = tmpfs("archive", "32m")
    home = mount / "home"
    filled_store(home)  # three runs of real published logs, one with its run directory
    subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
    env = {**site, "DLRUN_HOME": str(home)}
    runs = json.loads(_ok(run_cli("results", "list", "--json", env=env)))
    assert len(runs) == 3
    assert json.loads(_ok(run_cli("results", "show", runs[0]["id"], "--json", env=env)))["id"] == runs[0]["id"]
    _ok(run_cli("compare", env=env))
    _ok(run_cli("results", "export", "--out", str(tmp_path / "runs.csv"), env=env))
    assert len((tmp_path / "runs.csv").read_text().splitlines()) == 4
    bundle = tmp_path / "runs.bundle"
    _ok(run_cli("results", "export", "--out", str(bundle), "--with-logs", env=env))
    _ok(run_cli("report", "--out", str(tmp_path / "report"), "--allow-mismatch", env=env))
    assert (tmp_path / "report" / "index.html").is_file()
    for command in (["results", "import", str(bundle)], ["results", "delete", runs[0]["id"], "--yes"],
                    ["results", "import-log", str(LOGS / "horovod" / "issue712_pytorch_synthetic_4gpu.log"),
                     "--system", "sys-b"], ["run", "fast"]):
        _one_line(run_cli(*command, env=env), "read-only file system", f"({mount})")
    assert not (home / "ran-fast").exists()  # the job never started
    assert len(json.loads(_ok(run_cli("results", "list", "--json", env=env)))) == 3


def _staged(home: Path) -> list[Path]:
    return sorted((home / "runs").glob(".staging-*"))


def test_a_full_disk_is_one_line_and_the_run_is_stored_once_space_is_freed(tmp_path, tmpfs, site):
    mount = tmpfs("small", "8m")
    home = mount / "home"
    env = {**site, "DLRUN_HOME": str(home)}
    _ok(run_cli("run", "fast", env=env))
    # The job prints its result, then fills the disk: recording and storing the run cannot be written.
    _one_line(run_cli("run", "filler", env=env), "is full", f"free on {mount})")
    assert (home / "filler").stat().st_size > 0 and len(_staged(home)) == 1
    # With nothing free, reading the store is refused in the same line (SQLite needs room for its -shm file).
    for command in (["results", "list"], ["run", "fast"], ["compare"]):
        _one_line(run_cli(*command, env=env), "is full", str(mount))
    assert len(_staged(home)) == 1
    (home / "filler").unlink()
    runs = json.loads(_ok(run_cli("results", "list", "--json", env=env)))
    assert [(r["workload"], r["status"], r["value"]) for r in runs] == [("filler", "ok", 5.0), ("fast", "ok", 5.0)]
    assert _staged(home) == [] and not list(home.rglob("*.tmp"))  # nothing half-written left behind
    shown = json.loads(_ok(run_cli("results", "show", runs[0]["id"], "--json", env=env)))
    assert "recovered from the job's logs" in shown["provenance"]["reason"]


def test_a_disk_full_before_the_run_is_one_line_and_nothing_is_left(tmp_path, tmpfs, site):
    mount = tmpfs("full", "8m")
    home = mount / "home"
    env = {**site, "DLRUN_HOME": str(home)}
    _ok(run_cli("run", "fast", env=env))
    free = os.statvfs(mount).f_bavail * os.statvfs(mount).f_frsize
    (mount / "filler").write_bytes(b"\0" * (free - 40 * 1024))  # about 40 KB left, as the audit found it
    _one_line(run_cli("run", "fast", env=env), "is full", str(mount))
    (mount / "filler").unlink()
    runs = json.loads(_ok(run_cli("results", "list", "--json", env=env)))
    assert [r["status"] for r in runs] in (["ok"], ["lost", "ok"], ["ok", "ok"])  # the job ran or it did not
    assert _staged(home) == [] and not list(home.rglob("*.tmp"))


def test_a_store_damaged_past_its_header_is_refused_before_the_job_starts(dlrun_home, site):
    store = Store(dlrun_home / "results.sqlite")
    store.add_runs([({"id": f"20260101-000000-{index:06x}", "created_at": f"2026-01-01T00:{index // 60:02d}:{index % 60:02d}Z",
                      "status": "ok",
                      "site": "site-a", "nodes": 1, "ranks_per_node": 1, "world_size": 1, "batch_size": 8,
                      "plan": {"padding": "p" * 2000}, "provenance": {}},
                     [{"metric": "throughput", "value": 1.0 + index, "unit": "images/sec"}]) for index in range(300)])
    data = store.path.read_bytes()
    # The page that holds a run from the middle (its plan's padding beside its id) overwritten: the header, the
    # schema and the pages the newest runs are read from stay intact.
    page = next(n for n in range(len(data) // 4096) if b"20260101-000000-000096" in data[n * 4096:(n + 1) * 4096]
                and b"p" * 1000 in data[n * 4096:(n + 1) * 4096])
    with open(store.path, "r+b") as handle:
        handle.seek(page * 4096)
        handle.write(b"\xa5" * 4096)
    env = {**site, "DLRUN_HOME": str(dlrun_home)}
    assert len(json.loads(_ok(run_cli("results", "list", "--json", "--limit", "3", env=env)))) == 3
    proc = run_cli("run", "fast", env=env)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "is damaged" in proc.stderr and str(store.path) in proc.stderr
    assert not (dlrun_home / "ran-fast").exists() and not (dlrun_home / "runs").exists()
