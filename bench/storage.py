"""14 storage: the harness's standard-library reader against fio on the same file, sequential read GB/s.

Where an image has no fio, storage_seq_read's number comes from the harness's reader (O_DIRECT reads of 8 MiB
into one buffer); it must not understate the disk fio measures. Both read the same file of `--file-bytes`
(default 1 GiB; 64 MiB with --quick) in a temporary directory under bench/results (a disk, where /tmp may be
memory), with O_DIRECT, alternating per round. Goal: reader GB/s / fio GB/s >= 0.9, from the per-round ratios' interval.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from common import REPO_ROOT, Row, alternate, interval_text, ratio_interval, run_json, verdict, write_result

READER = REPO_ROOT / "launcher" / "dlrun" / "harness" / "harness_pytorch_storage.py"
GOAL = 0.9


def _reader_gbs(folder: Path, reader: str) -> float:
    record, _ = run_json([sys.executable, "-I", str(READER), "--test", "sequential", "--data-dir", str(folder),
                          "--reader", reader, "--steps", "2"], marker="DLRUN_RESULT ")
    return float(record["value"])


def _fio_gbs(folder: Path) -> float:
    """fio through the reader, its JSON read by dlrun's fio parser (as a storage run stores it)."""
    sys.path.insert(0, str(REPO_ROOT / "launcher"))
    import subprocess

    from dlrun.execute.storage import storage_result

    proc = subprocess.run([sys.executable, "-I", str(READER), "--test", "sequential", "--data-dir", str(folder),
                           "--reader", "fio", "--steps", "2"], capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"fio reader exited {proc.returncode}: {proc.stderr.strip()[-400:]}")
    result, _, error = storage_result([proc.stdout])
    if result is None:
        raise RuntimeError(error)
    return float(result["value"])


def measure(threads: int, repeats: int, log: Callable[[str], None], *, quick: bool = False) -> list[Row]:
    del threads  # one reading process
    if shutil.which("fio") is None:
        return [Row("storage", "reader vs fio, sequential GB/s", None, status="N/A", detail="no fio: make sysdeps")]
    size = (64 if quick else 1024) * 1024 * 1024
    (REPO_ROOT / "bench" / "results").mkdir(exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="storage-", suffix=".tmp", dir=REPO_ROOT / "bench" / "results"))
    try:
        with open(folder / "large.bin", "wb") as handle:
            for _ in range(size // (8 << 20)):
                handle.write(os.urandom(8 << 20))
        samples = alternate({"reader": lambda: _reader_gbs(folder, "builtin"), "fio": lambda: _fio_gbs(folder)},
                            repeats, log)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    interval = ratio_interval([r / f for r, f in zip(samples["reader"], samples["fio"])])
    data = {"file_bytes": size, "samples_gbs": samples, "interval": interval, "goal": GOAL}
    write_result("storage", data)
    return [Row("storage", "reader vs fio, sequential GB/s (O_DIRECT)", interval["ratio"], goal=GOAL,
                status=verdict(interval, GOAL), detail=interval_text(interval), extra=data)]
