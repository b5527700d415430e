"""Storage workloads (`kind: storage`): the harness's storage reader run for real through `dlrun run` over
files the test writes (`dlrun data synth --format storage`), its GB/s and files/s stored with how the page
cache was handled and the file system type; fio's JSON output (a real published one) read by dlrun's fio
parser as a storage result; the bad inputs refused in one line.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import cli_json, run_cli

from dlrun.execute.storage import storage_result
from dlrun.paths import HARNESS_DIR
from dlrun.results.parsers import parse_all

READER = HARNESS_DIR / "harness_pytorch_storage.py"
FIO_LOGS = Path(__file__).parent / "data" / "logs" / "fio"
CACHE_WORDS = ("O_DIRECT", "pages dropped with fadvise", "cache warm: could not drop")


def _findmnt_type(path: Path) -> str:
    """The file system type util-linux's findmnt reports for `path` (an independent reading); of mounts
    stacked on one point, the last, which is the one seen."""
    return subprocess.run(["findmnt", "-n", "-o", "FSTYPE", "--target", str(path)], capture_output=True,
                          text=True, check=True).stdout.split()[-1]


@pytest.fixture
def storage_data(tmp_path, dlrun_home) -> Path:
    out = tmp_path / "storage"
    info = cli_json("data", "synth", str(out), "--format", "storage", "--file-bytes", "3000000", "--files", "40",
                    "--small-bytes", "3000")
    assert info["bytes"] == 3000000 + 40 * 3000
    assert (out / "sequential" / "large.bin").stat().st_size == 3000000
    assert len(list((out / "small").iterdir())) == 40
    return out


def _stored(workload: str) -> dict:
    """The one stored run of `workload`, as `dlrun results show --json` gives it."""
    runs = [row for row in cli_json("results", "list") if row["workload"] == workload]
    assert len(runs) == 1, runs
    return cli_json("results", "show", runs[0]["id"])


def test_sequential_and_small_file_runs_store_gbs_and_files_per_second(storage_data):
    """The sequential read goes through fio (Debian's package, as in images that have it: `make sysdeps`
    installs it here), its JSON read by dlrun's fio parser; the small files through the harness's reader."""
    assert shutil.which("fio"), "fio is not installed: make sysdeps"
    run_cli("run", "storage_seq_read", "--data", str(storage_data / "sequential"), "--steps", "2", check=True)
    run_cli("run", "storage_small_files", "--data", str(storage_data / "small"), "--steps", "2", check=True)
    seq, small = _stored("storage_seq_read"), _stored("storage_small_files")
    for record, metric, unit in ((seq, "read_bandwidth", "GB/s"), (small, "file_read_rate", "files/s")):
        assert record["status"] == "ok", record
        [result] = record["results"]
        assert (result["metric"], result["unit"]) == (metric, unit)
        assert result["value"] > 0
        extra = result["extra"]
        assert extra["cache"] in CACHE_WORDS
        assert extra["fs_type"] == _findmnt_type(storage_data)
    fio = seq["results"][0]
    assert (fio["kind"], fio["extra"]["reader"], fio["extra"]["block_bytes"]) == ("fio", "fio", 2097152)
    assert fio["extra"]["fio"]["fio_version"].startswith("fio-")
    assert fio["extra"]["bytes_read"] == 2 * 2097152  # two loops over the file's whole 2 MiB blocks
    assert small["results"][0]["extra"]["reader"] == "builtin"
    assert small["results"][0]["extra"]["files_read"] == 2 * 40


def test_the_builtin_reader_bypasses_or_drops_the_page_cache_on_a_disk(tmp_path):
    folder = tmp_path / "seq"
    folder.mkdir()
    (folder / "a.bin").write_bytes(os.urandom(3000000))
    (folder / "b.bin").write_bytes(os.urandom(1000))
    record = _reader(folder, "--reader", "builtin", "--steps", "2", "--block-bytes", "1048576")
    assert record["cache"] in ("O_DIRECT", "pages dropped with fadvise")  # a disk file system, not memory
    assert (record["file"], record["bytes_read"], record["metric"], record["unit"]) == (
        "a.bin", 2 * 3000000, "read_bandwidth", "GB/s")
    assert record["value"] == pytest.approx(record["bytes_read"] / record["read_seconds"] / 1e9)
    assert record["fs_type"] == _findmnt_type(folder)


def _reader(folder: Path, *args: str) -> dict:
    """The storage reader run as the image runs it (python -I, its own directory's siblings): its record."""
    proc = subprocess.run([sys.executable, "-I", str(READER), "--test", "sequential", "--data-dir", str(folder),
                           *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1].split(" ", 1)[1])


def test_a_memory_file_system_says_the_cache_stayed_warm(tmp_path):
    """/dev/shm is tmpfs: its pages are the data, nothing can drop them, and the result says so."""
    shm = Path("/dev/shm")
    assert _findmnt_type(shm) == "tmpfs"
    folder = Path(shm / f"dlrun-storage-test-{os.getpid()}")
    folder.mkdir()
    try:
        (folder / "a.bin").write_bytes(os.urandom(200000))
        builtin = _reader(folder, "--steps", "1", "--reader", "builtin")
        fio = _reader(folder, "--steps", "1", "--reader", "fio")
    finally:
        (folder / "a.bin").unlink()
        folder.rmdir()
    assert (builtin["cache"], builtin["fs_type"], builtin["bytes_read"]) == ("cache warm: could not drop", "tmpfs",
                                                                             200000)
    assert (fio["cache"], fio["fs_type"], fio["reader"]) == ("cache warm: could not drop", "tmpfs", "fio")


def test_mount_points_with_spaces_are_read_from_mountinfo(tmp_path):
    sys.path.insert(0, str(HARNESS_DIR))
    try:
        import harness_pytorch_storage as reader
    finally:
        sys.path.remove(str(HARNESS_DIR))
    info = tmp_path / "mountinfo"
    info.write_text("22 1 8:1 / / rw - ext4 /dev/sda1 rw\n"
                    "40 22 0:50 / /mnt/my\\040disk rw,relatime shared:9 - xfs /dev/nvme0n1 rw\n")
    assert reader.file_system_type("/mnt/my disk/data", str(info)) == "xfs"
    assert reader.file_system_type("/mnt/my diskette", str(info)) == "ext4"
    assert reader.file_system_type("/x", str(tmp_path / "missing")) == "unknown"


def test_fio_json_is_read_by_the_fio_parser_as_the_stored_read_bandwidth():
    """kubestr's published fio 3.20 output (randread job first; see tests/data/logs/SOURCES.md) with the
    reader's line after it: the stored value is the fio parser's read bandwidth, not a number of the reader's."""
    document = json.loads((FIO_LOGS / "kubestr_randread_randwrite_fio-3.20.json").read_text())
    document["jobs"] = [job for job in document["jobs"] if job["read"]["io_bytes"] > 0][:1]
    line = {"reader": "fio", "cache": "O_DIRECT", "metric": "read_bandwidth", "unit": "GB/s", "fs_type": "xfs",
            "benchmark": "storage", "world_size": 1, "num_devices": 1}
    text = json.dumps(document, indent=2) + "\nDLRUN_RESULT " + json.dumps(line) + "\n"
    result, parsed, error = storage_result([text])
    assert error is None
    assert parsed.value == pytest.approx(document["jobs"][0]["read"]["bw_bytes"] / 1e9)
    assert (result["metric"], result["unit"], result["kind"]) == ("read_bandwidth", "GB/s", "fio")
    assert result["extra"]["cache"] == "O_DIRECT" and result["extra"]["fs_type"] == "xfs"
    assert result["extra"]["fio"]["fio_version"] == document["fio version"]
    [detected] = parse_all(text)  # `dlrun results parse` without --format: fio's figure, not the reader's line
    assert (detected.kind, detected.value) == ("fio", parsed.value)


def test_without_data_or_with_no_files_the_run_says_so_in_one_line(tmp_path, dlrun_home):
    proc = run_cli("run", "storage_seq_read")
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "--data DIR" in proc.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = run_cli("run", "storage_small_files", "--data", str(empty))
    assert proc.returncode != 0
    record = _stored("storage_small_files")
    assert record["status"] == "failed" and record["results"] == []
    assert f"--data-dir {empty} holds no data files to read" in record["provenance"]["reason"]


def test_more_than_one_process_and_bad_synth_sizes_are_refused(tmp_path, dlrun_home):
    proc = run_cli("run", "storage_seq_read", "--data", str(tmp_path), "--ranks-per-node", "2")
    assert proc.returncode == 2 and "valid: --nodes 1 --ranks-per-node 1" in proc.stderr
    proc = run_cli("run", "storage_small_files", "--data", str(tmp_path), "--batch-size", "4")
    assert proc.returncode == 2 and "valid: --steps and --warmup-steps, timed and untimed passes" in proc.stderr
    proc = run_cli("data", "synth", str(tmp_path / "x"), "--format", "storage", "--files", "0")
    assert proc.returncode == 2 and "--files 0; valid: 1 or more" in proc.stderr
    assert not (tmp_path / "x").exists()


def test_the_storage_workloads_are_in_the_catalog_and_its_schema(dlrun_home):
    listed = {row["name"]: row for row in cli_json("workloads", "list")}
    assert listed["storage_seq_read"]["kind"] == "storage"
    assert listed["storage_small_files"]["kind"] == "storage"
    schema = json.loads(run_cli("schema", "workloads", check=True).stdout)
    text = json.dumps(schema)
    assert '"storage"' in text and "small-files" in text and "storage_test" in text


SUMMITDEV_READ = (
    "jsrun --nrs 1 --rs_per_host 1 --tasks_per_rs 1 --cpu_per_rs 20 --gpu_per_rs 0 --bind packed:20 "
    "--launch_distribution packed --smpiargs=off bash -c 'export RANK=\"$JSM_NAMESPACE_RANK\" "
    "WORLD_SIZE=\"$JSM_NAMESPACE_SIZE\" LOCAL_RANK=\"$JSM_NAMESPACE_LOCAL_RANK\"; exec \"$@\"' dlrun-jsm "
    "singularity exec -B \"${{DLRUN_RUN_DIR}}\" --pwd \"${{DLRUN_RUN_DIR}}\" -B {path}:/data:ro "
    "--env GLOO_SOCKET_IFNAME=ib0 --env MASTER_ADDR=127.0.0.1 --env \"MASTER_PORT=${{DLRUN_MASTER_PORT:-29500}}\" "
    "--env NCCL_IB_DISABLE=1 --env NCCL_SOCKET_IFNAME=ib0 --env OMP_NUM_THREADS=20 --env PYTHONUNBUFFERED=1 "
    "{home}/images/cpu-reference/ppc64le/cpu-reference.sif python3 /opt/dlrun/harness_pytorch_storage.py "
    "--test sequential --steps 3 --warmup-steps 0 --data-dir /data --expected-world-size 1")


def test_han_dd_read_renders_for_summitdev_on_both_declared_file_systems(dlrun_home):
    """E002_dd_read is runnable by derivation (summitdev declares its file systems, dlrun stores
    read_bandwidth, the workload exists): one process per point reads the directory of the point's file system,
    which this host need not see (a node-local NVMe)."""
    proc = run_cli("reproduce", "E002_dd_read", "--system", "summitdev", "--dry-run", "--script")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    for path in ("/mnt/bb/dlrun", "/lustre/atlas/scratch/dlrun"):
        assert SUMMITDEV_READ.format(path=path, home=dlrun_home) in lines, path
    assert "#BSUB -nnodes 1" in lines
    shown = " ".join(run_cli("experiments", "show", "E002_dd_read").stdout.split())
    assert "runnable" in shown and "7.2" in shown and "We observe an I/O read throughput of 7.2 GB/s" in shown


def test_compare_by_data_path_sets_two_directories_side_by_side(tmp_path, dlrun_home):
    for name in ("a", "b"):
        folder = tmp_path / name
        folder.mkdir()
        for index in range(5):
            (folder / f"{index}.bin").write_bytes(os.urandom(2000))
        for _ in range(3):
            run_cli("run", "storage_small_files", "--data", str(folder), "--steps", "1", check=True)
    compared = cli_json("compare", "--by", "data-path", "--baseline", f"path:{tmp_path / 'a'}")
    assert compared["like_for_like"] and compared["differences"] == []
    [row] = compared["rows"]
    assert (row["data-path"], row["baseline"]) == (f"path:{tmp_path / 'b'}", f"path:{tmp_path / 'a'}")
    assert (row["n"], row["baseline_n"], row["unit"], row["model"]) == (3, 3, "files/s", "small-files")
    assert row["ratio"] == pytest.approx(row["geomean"] / row["baseline_geomean"])


def test_a_system_without_the_file_system_skips_the_point_and_says_why(catalog):
    from dlrun.catalog.experiment_points import expand

    experiment = catalog.experiment("E002_dd_read")
    points = expand(experiment, catalog.system("dgx-h100"), catalog.workloads, catalog.images)
    assert {p.skip for p in points} == {"system 'dgx-h100' declares no file system 'nvme' (storage: none)",
                                       "system 'dgx-h100' declares no file system 'lustre' (storage: none)"}
    placed = expand(experiment, catalog.system("summitdev"), catalog.workloads, catalog.images)
    assert [(p.skip, p.storage, p.plan_options()["data"]) for p in placed] == [
        (None, "/mnt/bb/dlrun", "/mnt/bb/dlrun"), (None, "/lustre/atlas/scratch/dlrun", "/lustre/atlas/scratch/dlrun")]


def test_only_a_declared_file_system_may_be_absent_here(catalog, tmp_path):
    from dlrun.errors import UsageError
    from dlrun.plan import resolve_plan

    plan = resolve_plan(catalog, "storage_seq_read", system="summitdev", image="cpu-reference",
                        data="/mnt/bb/dlrun/run1")
    assert (plan.data.path, plan.data.format, plan.world_size, plan.device) == ("/mnt/bb/dlrun/run1", "unknown", 1,
                                                                                "cpu")
    with pytest.raises(UsageError, match="is not a directory"):
        resolve_plan(catalog, "storage_seq_read", system="summitdev", image="cpu-reference", data="/mnt/bbx")
    with pytest.raises(UsageError, match="lacks; valid: --image cpu-reference"):
        resolve_plan(catalog, "storage_seq_read", system="summitdev", data="/mnt/bb/dlrun")


def test_the_storage_runs_read_inside_the_image(cpu_reference, tmp_path):
    """In cpu-reference under Charliecloud, as every workload runs: its fio (Debian's package) reads the large
    file from the --data bind, its harness's reader the small files; the file system is the host directory's."""
    from fixtures_images import dlrun

    env = {**cpu_reference["env"], "DLRUN_HOME": str(tmp_path / "home")}
    out = tmp_path / "storage"
    made = dlrun("data", "synth", str(out), "--format", "storage", "--file-bytes", "4194304", "--files", "20",
                 "--small-bytes", "2000", env=env)
    assert made.returncode == 0, made.stderr
    for workload, folder in (("storage_seq_read", "sequential"), ("storage_small_files", "small")):
        proc = dlrun("run", workload, "--image", "cpu-reference", "--runtime", "charliecloud", "--data",
                     str(out / folder), "--steps", "1", env=env, timeout=600)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    runs = {row["workload"]: row for row in json.loads(dlrun("results", "list", "--json", env=env).stdout)}
    seq = json.loads(dlrun("results", "show", runs["storage_seq_read"]["id"], "--json", env=env).stdout)
    small = json.loads(dlrun("results", "show", runs["storage_small_files"]["id"], "--json", env=env).stdout)
    assert seq["image"] == "cpu-reference" and seq["runtime"] == "charliecloud"
    [read], [files] = seq["results"], small["results"]
    assert (read["unit"], read["extra"]["reader"], read["extra"]["fio"]["fio_version"]) == ("GB/s", "fio", "fio-3.33")
    assert read["extra"]["bytes_read"] == 4194304 and read["value"] > 0
    assert (files["unit"], files["extra"]["reader"], files["extra"]["files_read"]) == ("files/s", "builtin", 20)
    for result in (read, files):
        assert result["extra"]["fs_type"] == _findmnt_type(out)
        assert result["extra"]["cache"] in CACHE_WORDS
