"""Stores, keys and bundles for the bundle tests: runs imported from real published logs (tests/data/logs,
sources in SOURCES.md), real SSH keys made by ssh-keygen, and archives rebuilt member by member to tamper with."""
from __future__ import annotations

import gzip
import io
import shutil
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path

from dlrun.results.exchange.import_log import import_log
from dlrun.results.store import Store

LOGS = Path(__file__).parent / "data" / "logs"
#: Real logs whose runs fill a store: one nccl-tests run, one tf_cnn_benchmarks run, one Horovod run.
SOURCE_LOGS = ("nccl-tests/pkb_allreduce_2node.log", "tf_cnn_benchmarks/horovod466_mpirun_1gpu.log",
               "horovod/issue712_pytorch_synthetic_4gpu.log")


def filled_store(home: Path, site: str = "site-a", system: str = "sys-a") -> Store:
    """A store under `home` holding a run per SOURCE_LOGS; the Horovod run has a run directory holding its log
    (as output.log and logs/rank.0/stdout), the way a run launched here keeps its rank output."""
    store = Store(home / "results.sqlite")
    for index, name in enumerate(SOURCE_LOGS):
        pairs = import_log(LOGS / name, system=system, site=site, now=1_795_000_000 + index)
        if name.startswith("horovod/"):
            run_dir = home / "runs" / pairs[0][0]["id"]
            (run_dir / "logs" / "rank.0").mkdir(parents=True)
            shutil.copyfile(LOGS / name, run_dir / "output.log")
            shutil.copyfile(LOGS / name, run_dir / "logs" / "rank.0" / "stdout")
            pairs[0][0]["run_dir"] = str(run_dir)
        store.add_runs(pairs)
    return store


def make_key(directory: Path, name: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    key = directory / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)], check=True)
    return key


def allowed_signers(path: Path, entries: dict[str, Path]) -> Path:
    """An allowed-signers file: principal -> private key (its .pub beside it), for the dlrun-bundle namespace."""
    lines = []
    for principal, key in entries.items():
        kind, blob = Path(f"{key}.pub").read_text().split()[:2]
        lines.append(f'{principal} namespaces="dlrun-bundle" {kind} {blob}\n')
    path.write_text("".join(lines))
    return path


def members(bundle: Path) -> list[tuple[tarfile.TarInfo, bytes]]:
    with tarfile.open(bundle, "r:gz") as tar:
        return [(info, tar.extractfile(info).read() if info.isreg() else b"") for info in tar.getmembers()]


def rebuild(bundle: Path, out: Path,
            change: Callable[[list[tuple[tarfile.TarInfo, bytes]]], list[tuple[tarfile.TarInfo, bytes]]]) -> Path:
    """`bundle` rewritten as a fresh tar.gz after `change` edited its (header, data) list."""
    edited = change(members(bundle))
    raw = io.BytesIO()
    with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as packed, tarfile.open(fileobj=packed, mode="w") as tar:
        for info, data in edited:
            if info.isreg():
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    out.write_bytes(raw.getvalue())
    return out


def regular(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data
