"""Real training data: `dlrun data synth` writes it, the PyTorch harness reads it (TFRecord without TensorFlow,
JPEG ImageFolder trees), anything else fails with one line, and --stage-data copies it to the node first."""
from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import cli_json, run_cli
from golden_files import GOLDEN as GOLDEN_ROOT, assert_golden

from dlrun.datasets import SynthSpec, synthesize
from dlrun.datasets.tfrecord import crc32c as writer_crc32c
from dlrun.datasets.tfrecord import example, write_record
from dlrun.errors import UsageError
from dlrun.paths import HARNESS_DIR
from dlrun.staging import staged_path
from dlrun.harness import load_harness

GOLDEN = GOLDEN_ROOT / "scripts"
HARNESS = str(HARNESS_DIR / "harness_pytorch.py")
TINY = ("--steps", "2", "--warmup-steps", "1", "--batch-size", "4")


@pytest.fixture(scope="module")
def tfrecord_mod():
    return load_harness("pytorch", "tfrecord")


def _harness(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, HARNESS, "--model", "trivial", *TINY, *args], capture_output=True,
                          text=True, timeout=300)


# ------------------------------------------------------------------------------------ TFRecord, both sides
def test_crc32c_matches_the_published_check_values(tfrecord_mod):
    # RFC 3720 B.4 / the CRC catalogue: CRC-32C("123456789") and of 32 zero bytes
    for crc in (writer_crc32c, tfrecord_mod._crc32c_python, tfrecord_mod.crc32c):
        assert crc(b"123456789") == 0xE3069283
        assert crc(bytes(32)) == 0x8A9136AA


def test_example_round_trip(tmp_path, tfrecord_mod):
    path = tmp_path / "train-00000-of-00001"
    records = [example({"image/encoded": b"\xff\xd8jpeg" * n, "image/class/label": n, "image/neg": -5,
                        "image/f": 0.5}) for n in (1, 300)]
    with open(path, "wb") as handle:
        for record in records:
            write_record(handle, record)
    index = tfrecord_mod.index_records(str(path))
    assert [length for _, length in index] == [len(r) for r in records]
    with open(path, "rb") as handle:
        parsed = [tfrecord_mod.parse_example(tfrecord_mod.read_record(handle, str(path), off, n))
                  for off, n in index]
    assert parsed[1] == {"image/encoded": [b"\xff\xd8jpeg" * 300], "image/class/label": [300],
                         "image/neg": [-5], "image/f": [0.5]}


def test_corrupted_records_are_named(tmp_path, tfrecord_mod):
    path = tmp_path / "train-00000-of-00001"
    with open(path, "wb") as handle:
        write_record(handle, example({"image/encoded": b"x" * 64, "image/class/label": 1}))
        write_record(handle, example({"image/encoded": b"y" * 64, "image/class/label": 2}))
    good = path.read_bytes()
    first = 12 + struct.unpack("<Q", good[:8])[0] + 4  # the second record's offset
    damaged = bytearray(good)
    damaged[first + 12 + 20] ^= 0xFF  # a data byte of the second record
    path.write_bytes(bytes(damaged))
    index = tfrecord_mod.index_records(str(path))  # lengths are intact
    with open(path, "rb") as handle, pytest.raises(tfrecord_mod.TFRecordError,
                                                   match=f"record at byte {first}: data checksum mismatch"):
        tfrecord_mod.read_record(handle, str(path), *index[1])
    damaged = bytearray(good)
    damaged[first] ^= 0x01  # the second record's length
    path.write_bytes(bytes(damaged))
    with pytest.raises(tfrecord_mod.TFRecordError, match=f"record at byte {first}: length checksum mismatch"):
        tfrecord_mod.index_records(str(path))
    path.write_bytes(good[:-3])
    with pytest.raises(tfrecord_mod.TFRecordError, match="the file ends first"):
        tfrecord_mod.index_records(str(path))


# ------------------------------------------------------------------------------------ dlrun data synth
@pytest.mark.parametrize("args,message", [
    (["--format", "jpg"], "unknown format 'jpg'; did you mean 'jpeg'?"),
    (["--images", "0"], "--images must be >= 1, got 0"),
    (["--classes", "20", "--images", "10"], "--classes 20; valid: 1..10"),
    (["--size", "4"], "--size 4; valid: 8..4096"),
])
def test_synth_bad_values_exit_2_and_write_nothing(tmp_path, args, message):
    proc = run_cli("data", "synth", *args, str(tmp_path / "out"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_synth_refuses_an_existing_directory_and_leaves_nothing_on_error(tmp_path, monkeypatch):
    (tmp_path / "out").mkdir()
    with pytest.raises(UsageError, match="already exists"):
        synthesize(SynthSpec("jpeg", 4, 2, 16), tmp_path / "out")

    def broken(*_):
        raise OSError("disk full")
    monkeypatch.setattr("dlrun.datasets.synth.jpeg_bytes", broken)
    with pytest.raises(OSError):
        synthesize(SynthSpec("tfrecord", 4, 2, 16), tmp_path / "other")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


# ------------------------------------------------------------------------------------ training from it
@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("datasets")
    for fmt in ("jpeg", "tfrecord"):
        run_cli("data", "synth", "--format", fmt, "--images", "24", "--classes", "3", "--size", "40",
                "--shards", "2", str(root / fmt), check=True)
    return root


@pytest.mark.slow
def test_tfrecord_dataset_trains_and_the_result_says_so(dlrun_home, datasets):
    proc = run_cli("run", "trivial", *TINY, "--data", str(datasets / "tfrecord"), "--data-workers", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run,) = cli_json("results", "list")
    extra = cli_json("results", "show", run["id"])["results"][0]["extra"]
    assert extra["data_source"] == "tfrecord" and extra["data_path"] == str(datasets / "tfrecord")
    assert extra["data_images"] == 24 and extra["images_decoded"] >= 3 * 4 and extra["data_workers"] == 2
    assert "Dataset:     imagenet (tfrecord: " in proc.stdout


@pytest.mark.slow
def test_staged_jpeg_dataset_trains_from_the_copy_and_records_bytes_and_seconds(dlrun_home, datasets):
    source = datasets / "jpeg"
    proc = run_cli("run", "trivial", *TINY, "--data", str(source), "--stage-data", "--data-workers", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run,) = cli_json("results", "list")
    shown = cli_json("results", "show", run["id"])
    extra = shown["results"][0]["extra"]
    size = sum(p.stat().st_size for p in source.rglob("*.JPEG"))
    staged = shown["provenance"]["data_stage"]
    assert staged["source"] == str(source) and staged["nodes"] == 1 and staged["bytes"] == size
    assert staged["seconds"] >= 0 and staged["per_node"][0]["files"] == 24
    assert extra["data_stage"]["bytes"] == size
    assert extra["data_source"] == "jpeg" and extra["data_path"] == staged["path"] != str(source)
    assert extra["images_decoded"] >= 12 and Path(staged["path"], "train").is_dir()


@pytest.mark.slow
def test_junk_directory_fails_the_run_with_one_line(dlrun_home, tmp_path):
    junk = tmp_path / "junk" / "train" / "n01440764"
    junk.mkdir(parents=True)
    for n in range(8):
        (junk / f"n01440764_{n}.JPEG").write_bytes(os.urandom(2000))
    proc = run_cli("run", "trivial", *TINY, "--data", str(tmp_path / "junk"), "--data-workers", "0")
    assert proc.returncode != 0
    (run,) = cli_json("results", "list")
    assert run["status"] == "failed"
    assert "n01440764_0.JPEG: cannot decode as an image" in proc.stdout + proc.stderr


def test_fifo_and_empty_directories_are_errors_not_synthetic(tmp_path):
    folder = tmp_path / "fifo" / "n01"
    folder.mkdir(parents=True)
    os.mkfifo(folder / "a.JPEG")  # reading it would block forever
    (tmp_path / "empty").mkdir()
    for name, expected in (("fifo", "fifo/n01/a.JPEG is not a regular file"), ("empty", "holds no dataset")):
        proc = _harness("--data-dir", str(tmp_path / name), "--data-workers", "0")
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and expected in lines[0], proc.stderr
        assert "expected TFRecord shards train-NNNNN-of-NNNNN or image folders" in lines[0]
        assert "DLRUN_RESULT" not in proc.stdout


# ------------------------------------------------------------------------------------ rendering --stage-data
def test_slurm_script_stages_once_per_node_golden(tmp_path, monkeypatch):
    from matrix_catalog import matrix_plan

    from dlrun.render import render_job

    monkeypatch.setenv("DLRUN_HOME", "/nonexistent/dlrun-home")
    monkeypatch.setenv("XDG_CONFIG_HOME", "/nonexistent/xdg-config")
    monkeypatch.delenv("DLRUN_PATH", raising=False)
    data = tmp_path / "imagenet"
    data.mkdir()
    plan = matrix_plan("singularity", "srun", "roce", scheduler="slurm", data=str(data), stage_data=True)
    staged = staged_path(str(data))
    script = render_job(plan).script
    assert plan.data.path == str(data) and plan.data.staged_copy == staged
    assert script.count(staged) == 2  # the copy step's target and the bind
    script = script.replace(staged, staged_path("/scratch/imagenet")).replace(str(data), "/scratch/imagenet")
    assert_golden(GOLDEN / "slurm-stage-data.sh", script, what="the Slurm --stage-data script")


def test_stage_data_needs_data_and_a_scheduler_that_reaches_every_node(tmp_path):
    from matrix_catalog import matrix_plan

    from dlrun.render import render_job

    with pytest.raises(UsageError, match="valid: --stage-data with --data DIR"):
        matrix_plan("singularity", "srun", "roce", scheduler="slurm", stage_data=True)
    plan = matrix_plan("host", "mpirun", "ib", scheduler="kubernetes", data=str(tmp_path), stage_data=True)
    with pytest.raises(UsageError, match="--stage-data with scheduler kubernetes"):
        render_job(plan)
    for scheduler, launcher, step in (("pbs", "mpirun", "pbsdsh -u /bin/bash -c"),
                                      ("lsf", "jsrun", "jsrun --nrs 2 --rs_per_host 1")):
        plan = matrix_plan("singularity", launcher, "ib", scheduler=scheduler, data=str(tmp_path),
                           stage_data=True)
        assert step in render_job(plan).script


def test_bad_data_options_exit_2_with_one_line(dlrun_home, tmp_path):
    os.mkfifo(tmp_path / "fifo")
    for args, message in ((["--stage-data"], "valid: --stage-data with --data DIR"),
                          (["--data", str(tmp_path / "fifo")], "is not a directory")):
        proc = run_cli("run", "trivial", "--dry-run", *args)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr
