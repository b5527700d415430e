"""`dlrun data synth`: a small ImageNet-shaped training set, really JPEG-encoded, in either layout.

- `jpeg`: an ImageFolder tree, `OUT/train/<wnid>/<wnid>_<n>.JPEG`, classes named like ImageNet's WordNet ids
  (`n00000000`, `n00000001`, ...).
- `tfrecord`: shards `OUT/train-00000-of-0000K` of tf.train.Example records with the features the ImageNet
  build scripts (tensorflow/models inception `build_imagenet_data.py`, which tf_cnn_benchmarks reads) write:
  `image/encoded` (the JPEG), `image/format` (`JPEG`), `image/class/label` (1-based: 0 is the background
  class there), `image/class/synset`, `image/height`, `image/width`, `image/colorspace`, `image/channels`,
  `image/filename`.
- `storage`: what the storage workloads read: `OUT/sequential/large.bin` (one file of `file_bytes`, for
  storage_seq_read; Han et al.'s dd test read 2.5 GB) and `OUT/small/NNNNNN.bin` (`files` files of
  `small_bytes`, for storage_small_files; about an ImageNet JPEG's mean size). Random bytes: nothing compresses.

Images are smooth random colour fields (a coarse random grid, bicubically upsampled, plus a class tint), so
their JPEGs are of a natural image's size rather than of noise's. Everything is written into a hidden
directory beside OUT and renamed into place at the end: OUT exists complete or not at all.
"""
from __future__ import annotations

import io
import os
import random
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from dlrun.datasets.tfrecord import example, write_record
from dlrun.errors import UsageError, unknown_name

FORMATS = ("jpeg", "tfrecord")  # training sets, in the layouts the harness reads
SYNTH_FORMATS = (*FORMATS, "storage")  # and the files the storage workloads read
CHUNK = 8 * 1024 * 1024  # bytes written at a time
MAX_CLASSES = 1000  # the models' classifier size
QUALITY = 90  # libjpeg quality, as ImageNet's own JPEGs are typically encoded


@dataclass(frozen=True)
class SynthSpec:
    format: str
    images: int
    classes: int
    size: int
    shards: int = 4
    seed: int = 0
    file_bytes: int = 2_500_000_000
    files: int = 1000
    small_bytes: int = 110_000

    def check(self) -> None:
        if self.format not in SYNTH_FORMATS:
            raise unknown_name("format", self.format, SYNTH_FORMATS)
        if self.format == "storage":
            for flag, value in (("--file-bytes", self.file_bytes), ("--files", self.files),
                                ("--small-bytes", self.small_bytes)):
                if value < 1:
                    raise UsageError(f"{flag} {value}; valid: 1 or more")
            return
        if self.images < 1:
            raise UsageError(f"--images must be >= 1, got {self.images}")
        if not 1 <= self.classes <= min(self.images, MAX_CLASSES):
            raise UsageError(f"--classes {self.classes}; valid: 1..{min(self.images, MAX_CLASSES)} "
                             f"(at most --images and at most {MAX_CLASSES})")
        if not 8 <= self.size <= 4096:
            raise UsageError(f"--size {self.size}; valid: 8..4096 pixels")
        if not 1 <= self.shards <= self.images:
            raise UsageError(f"--shards {self.shards}; valid: 1..{self.images} (at most --images)")


def wnid(label: int) -> str:
    return f"n{label:08d}"


def jpeg_bytes(rng: random.Random, size: int, label: int, classes: int) -> bytes:
    from PIL import Image

    grid = max(2, size // 16)
    coarse = Image.frombytes("RGB", (grid, grid), rng.randbytes(grid * grid * 3))
    image = coarse.resize((size, size), Image.BICUBIC)
    hue = Image.new("RGB", (size, size), ((label * 97) % 256, (label * 57 + 80) % 256, (label * 13 + 160) % 256))
    image = Image.blend(image, hue, 0.3)
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=QUALITY)
    return out.getvalue()


def _labels(spec: SynthSpec) -> list[int]:
    """0-based labels, every class used, in a seeded order."""
    labels = [i % spec.classes for i in range(spec.images)]
    random.Random(spec.seed).shuffle(labels)
    return labels


def _write_jpeg(spec: SynthSpec, root: Path, rng: random.Random) -> None:
    for index, label in enumerate(_labels(spec)):
        folder = root / "train" / wnid(label)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{wnid(label)}_{index}.JPEG").write_bytes(jpeg_bytes(rng, spec.size, label, spec.classes))


def _write_tfrecord(spec: SynthSpec, root: Path, rng: random.Random) -> None:
    labels = _labels(spec)
    per_shard = -(-spec.images // spec.shards)
    for shard in range(spec.shards):
        with open(root / f"train-{shard:05d}-of-{spec.shards:05d}", "wb") as handle:
            for index in range(shard * per_shard, min((shard + 1) * per_shard, spec.images)):
                label = labels[index]
                write_record(handle, example({
                    "image/encoded": jpeg_bytes(rng, spec.size, label, spec.classes),
                    "image/format": b"JPEG",
                    "image/class/label": label + 1,
                    "image/class/synset": wnid(label).encode(),
                    "image/height": spec.size,
                    "image/width": spec.size,
                    "image/colorspace": b"RGB",
                    "image/channels": 3,
                    "image/filename": f"{wnid(label)}_{index}.JPEG".encode(),
                }))


def _write_storage(spec: SynthSpec, root: Path, rng: random.Random) -> None:
    (root / "sequential").mkdir()
    with open(root / "sequential" / "large.bin", "wb") as handle:
        for start in range(0, spec.file_bytes, CHUNK):
            handle.write(rng.randbytes(min(CHUNK, spec.file_bytes - start)))
    (root / "small").mkdir()
    for index in range(spec.files):
        (root / "small" / f"{index:06d}.bin").write_bytes(rng.randbytes(spec.small_bytes))


WRITERS = {"jpeg": _write_jpeg, "tfrecord": _write_tfrecord, "storage": _write_storage}


def synthesize(spec: SynthSpec, out: Path) -> dict:
    """Write the dataset to `out` (which must not exist); what was written."""
    spec.check()
    out = Path(out)
    if out.exists() or out.is_symlink():
        raise UsageError(f"{str(out)!r} already exists; valid: a path that does not exist yet")
    parent = out.parent
    if not parent.is_dir():
        raise UsageError(f"{str(parent)!r} is not a directory; valid: OUT inside an existing directory")
    tmp = Path(tempfile.mkdtemp(dir=parent, prefix=f".{out.name}.", suffix=".tmp"))
    try:
        rng = random.Random(spec.seed)
        WRITERS[spec.format](spec, tmp, rng)
        total = sum(f.stat().st_size for f in tmp.rglob("*") if f.is_file())
        tmp.chmod(0o755)
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if spec.format == "storage":
        return {"path": str(out), "format": "storage", "bytes": total,
                "sequential": f"{out / 'sequential'} (one file of {spec.file_bytes} bytes: storage_seq_read)",
                "small": f"{out / 'small'} ({spec.files} files of {spec.small_bytes} bytes: storage_small_files)"}
    return {"path": str(out), "format": spec.format, "images": spec.images, "classes": spec.classes,
            "size": spec.size, "bytes": total, "shards": spec.shards if spec.format == "tfrecord" else None}
