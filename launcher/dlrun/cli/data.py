"""`dlrun data synth`: write a small ImageNet-shaped dataset that `dlrun run --data DIR` trains from."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dlrun.cli.options import JsonOpt
from dlrun.cli.output import fields_table, handle_errors, print_json
from dlrun.errors import UsageError

data_app = typer.Typer(help="Datasets the workloads read (--data DIR).", no_args_is_help=True)


@data_app.command("synth")
@handle_errors
def synth(out: Annotated[Path, typer.Argument(help="Directory to create (must not exist).", show_default=False)],
          fmt: Annotated[str, typer.Option("--format", help="jpeg (ImageFolder: train/<class>/*.JPEG), tfrecord "
                                                           "(train-NNNNN-of-NNNNN shards of tf.train.Example), or "
                                                           "storage (sequential/large.bin and small/*.bin: what "
                                                           "the storage workloads read).")]
          = "jpeg",
          images: Annotated[int, typer.Option("--images", help="Images to write.")] = 256,
          classes: Annotated[int, typer.Option("--classes", help="Classes (1..1000).")] = 10,
          size: Annotated[int, typer.Option("--size", help="Image side in pixels (square JPEGs).")] = 256,
          shards: Annotated[int, typer.Option("--shards", help="tfrecord: number of shard files.")] = 4,
          seed: Annotated[int, typer.Option("--seed", help="Random seed (same seed, same bytes).")] = 0,
          file_bytes: Annotated[int, typer.Option("--file-bytes", help="storage: bytes of the one large file "
                                                                       "(Han et al.'s dd test read 2.5 GB).")]
          = 2_500_000_000,
          files: Annotated[int, typer.Option("--files", help="storage: number of small files.")] = 1000,
          small_bytes: Annotated[int, typer.Option("--small-bytes", help="storage: bytes of each small file.")]
          = 110_000,
          as_json: JsonOpt = False) -> None:
    """Write OUT: IMAGES real JPEG images of CLASSES classes, SIZE x SIZE, as an ImageFolder tree or TFRecord
    shards (ImageNet's layout), or the files the storage workloads read. Written into a hidden directory beside
    OUT and renamed into place."""
    if fmt != "storage":
        _need_image_encoders()
    from dlrun.datasets import SynthSpec, synthesize
    info = synthesize(SynthSpec(format=fmt, images=images, classes=classes, size=size, shards=shards, seed=seed,
                                file_bytes=file_bytes, files=files, small_bytes=small_bytes), out)
    if as_json:
        print_json(info)
        return
    fields_table(f"dataset {info['path']}", [[key, value] for key, value in info.items() if value is not None])


def _need_image_encoders() -> None:
    try:
        import PIL  # noqa: F401
    except ImportError:
        raise UsageError("dlrun data synth encodes JPEGs with Pillow: pip install -e '.[data]'") from None
    try:
        import crc32c  # noqa: F401
    except ImportError:
        raise UsageError("dlrun data synth checksums TFRecords with crc32c: pip install -e '.[data]'") from None
