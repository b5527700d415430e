"""Real runs on this machine: real PyTorch training steps, real OpenMPI mpirun, real store rows."""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import cli_json, run_cli
from job_gate import wait_until
from dlrun.paths import harness_files

SECRET = "hunter2-do-not-record"


def _files_contain(root: Path, needle: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()]


@pytest.mark.mpi
def test_two_ranks_through_mpirun_store_world_size_2(dlrun_home):
    proc = run_cli("run", "resnet18", "--ranks-per-node", "2", "--steps", "3", "--batch-size", "4",
                   "--warmup-steps", "1", env={"MY_SECRET_TOKEN": SECRET})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "total images/sec:" in proc.stdout  # rank 0's output streamed live

    runs = cli_json("results", "list")
    assert len(runs) == 1
    run = runs[0]
    assert run["status"] == "ok" and run["world_size"] == 2 and run["launcher"] == "mpirun"
    shown = cli_json("results", "show", run["id"])
    result = shown["results"][0]
    assert result["num_devices"] == 2 and result["batch_size"] == 4
    extra = result["extra"]
    assert extra["world_size"] == 2 and len(extra["per_rank_images_per_sec"]) == 2
    assert extra["value"] == pytest.approx(2 * 4 * 3 / extra["wall_time_s"], rel=1e-3)
    # each rank re-executed itself under mpirun with tcmalloc preloaded (Makefile installs it)
    assert extra["allocator"] == "tcmalloc" and "libtcmalloc" in extra["allocator_library"]
    assert shown["provenance"]["harness_sha256"]  # one digest over the entry file and its siblings
    assert sorted(shown["provenance"]["harness_files_sha256"]) == sorted(p.name for p in harness_files("pytorch"))

    run_dir = Path(run["run_dir"])
    assert run_dir.name == run["id"] and run_dir.parent == dlrun_home / "runs"
    for name in ("plan.json", "run.sh", "environment.json", "status.json", "result.json", "output.log"):
        assert (run_dir / name).is_file(), name
    for rank in (0, 1):
        assert (run_dir / "logs" / "1" / f"rank.{rank}" / "stdout").is_file()
    assert json.loads((run_dir / "status.json").read_text())["state"] == "ok"
    assert json.loads((run_dir / "plan.json").read_text())["world_size"] == 2
    assert not list((dlrun_home / "runs").glob(".staging-*"))

    env = json.loads((run_dir / "environment.json").read_text())["env"]
    assert env["MY_SECRET_TOKEN"] == "<redacted>"
    assert not _files_contain(dlrun_home, SECRET), "a secret value was recorded"


@pytest.mark.mpi
def test_allreduce_run_stores_bus_bandwidth(dlrun_home):
    proc = run_cli("run", "allreduce", "--ranks-per-node", "2", "--steps", "2", "--warmup-steps", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "# Avg bus bandwidth" in proc.stdout and "bus bandwidth" in proc.stdout
    (run,) = cli_json("results", "list")
    assert run["status"] == "ok" and run["unit"] == "GB/s" and run["value"] > 0
    assert run["batch_size"] is None and run["world_size"] == 2
    result = cli_json("results", "show", run["id"])["results"][0]
    assert result["metric"] == "busbw" and result["num_devices"] == 2
    sizes = result["extra"]["sizes"]
    assert [s["bytes"] for s in sizes] == [8 << i for i in range(24)]  # 8 B .. 64 MiB
    assert result["value"] == sizes[-1]["busbw_gbs"] and all(s["wrong"] == 0 for s in sizes)
    table = run_cli("results", "list", check=True).stdout
    assert "GB/s" in table


@pytest.mark.slow
def test_single_rank_run_and_results_views(dlrun_home):
    proc = run_cli("run", "trivial", "--steps", "3", "--warmup-steps", "1", "--allocator", "jemalloc")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "total images/sec" in proc.stdout
    runs = cli_json("results", "list")
    assert [r["world_size"] for r in runs] == [1]
    extra = cli_json("results", "show", runs[0]["id"])["results"][0]["extra"]
    assert extra["allocator"] == "jemalloc"
    assert runs[0]["value"] > 0
    run_dir = Path(runs[0]["run_dir"])
    assert (run_dir / "logs" / "rank.0" / "stdout").read_text() == (run_dir / "output.log").read_text()
    table = run_cli("results", "list", check=True).stdout
    assert runs[0]["id"][:15] in table


def test_failed_run_is_recorded_failed(dlrun_home, tmp_path):
    site = tmp_path / "site" / "images"
    site.mkdir(parents=True)
    (site / "broken.yaml").write_text(
        f"name: broken\ndescription: a host image whose interpreter fails\nkind: host\narch: [{os.uname().machine}]\n"
        "python: /bin/false\nharness_dir: /nonexistent\n")
    proc = run_cli("run", "trivial", "--image", "broken", env={"DLRUN_PATH": str(tmp_path / "site")})
    assert proc.returncode == 1
    assert "failed: exit code 1" in proc.stderr
    runs = cli_json("results", "list")
    assert [r["status"] for r in runs] == ["failed"]
    assert runs[0]["value"] is None
    status = json.loads((Path(runs[0]["run_dir"]) / "status.json").read_text())
    assert status["state"] == "failed" and status["exit_code"] == 1


@pytest.mark.mpi
def test_sigint_cancels_and_records_cancelled(dlrun_home):
    proc = subprocess.Popen([sys.executable, "-m", "dlrun.cli", "run", "resnet18", "--steps", "100000",
                             "--batch-size", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    store = dlrun_home / "runs"

    def training() -> bool:  # a step row printed: the job runs (and cannot finish 100,000 steps meanwhile)
        return proc.poll() is not None or any("images/sec" in log.read_text(errors="replace")
                                              for log in store.glob(".staging-*/output.log"))

    try:
        wait_until(training, "the run's first training step")
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, out + err
    db = sqlite3.connect(dlrun_home / "results.sqlite")
    assert db.execute("SELECT status FROM runs").fetchall() == [("cancelled",)]
    assert not list(store.glob(".staging-*"))
