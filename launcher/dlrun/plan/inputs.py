"""What the user types, turned into plan data: binds, environment entries, the dataset, the fabric, batch options.

Each function checks one kind of input and says in one line what was wrong and what would be valid.
"""
from __future__ import annotations

import itertools
import os
from pathlib import Path

from pydantic import ValidationError

from dlrun.catalog.models import SchedulerOptions, SystemSpec
from dlrun.catalog.time_limits import TIME_FORMS
from dlrun.errors import UsageError
from dlrun.fabrics import check_fabric_name, fabric_settings
from dlrun.harness.harness_contract import tfrecord_split
from dlrun.plan.resolved import DATA_MOUNT, Bind, DataSpec
from dlrun.staging import staged_path

#: How many top-level entries of a dataset directory are looked at to tell its format.
_FORMAT_PEEK = 4096


def parse_bind(spec: str) -> Bind:
    """`SRC[:DST][:ro|rw]` -> Bind (read-only unless `:rw`)."""
    parts = spec.split(":")
    mode = "ro"
    if len(parts) > 1 and parts[-1] in ("ro", "rw"):
        mode = parts.pop()
    if len(parts) == 1:
        parts.append(parts[0])
    if len(parts) != 2 or not parts[0] or not parts[1].startswith("/"):
        raise UsageError(f"bad --bind {spec!r}; valid: SRC[:DST][:ro|rw] with an absolute DST")
    return Bind(source=parts[0], target=parts[1], read_only=mode == "ro")


def check_binds(binds: list[Bind], data: DataSpec | None) -> None:
    """/data belongs to --data: a --bind onto it would replace (or fake) the dataset the ranks train on."""
    for bind in binds:
        if bind.target.rstrip("/") == DATA_MOUNT:
            given = f"--data {data.path} and " if data is not None else ""
            raise UsageError(f"{given}--bind {bind.source}:{bind.target}: {DATA_MOUNT} is where --data mounts the "
                             f"dataset; valid: --data DIR for the dataset, or --bind onto another path")


def parse_env(spec: str) -> tuple[str, str]:
    name, sep, value = spec.partition("=")
    if not sep or not name or not name.replace("_", "a").isalnum() or name[0].isdigit():
        shown = f"{name}=..." if sep else spec  # the value may be a secret: never echo it
        raise UsageError(f"bad --env {shown!r}; valid: NAME=VALUE with NAME made of letters, digits and _")
    return name, value


def dataset_format(path: Path) -> str:
    """tfrecord (ImageNet shards), jpeg (a tree of class folders) or unknown, from the top level only."""
    has_dirs = False
    with os.scandir(path) as entries:
        for entry in itertools.islice(entries, _FORMAT_PEEK):
            if tfrecord_split(entry.name):
                return "tfrecord"
            has_dirs = has_dirs or entry.is_dir()
    return "jpeg" if has_dirs else "unknown"


def dataset(data_dir: str | None, *, stage: bool) -> DataSpec | None:
    """--data DIR (an existing directory) and --stage-data as the plan's dataset; None for synthetic data."""
    if data_dir is None:
        if stage:
            raise UsageError("--stage-data copies the --data directory to each node; valid: --stage-data with "
                             "--data DIR")
        return None
    path = Path(data_dir)
    if not path.is_dir():
        raise UsageError(f"--data {data_dir!r} is not a directory; valid: an existing dataset directory")
    source = str(path.resolve())
    try:
        kind = dataset_format(path)
    except OSError as exc:
        raise UsageError(f"--data {data_dir!r} cannot be read ({exc.strerror}); valid: a readable dataset "
                         "directory") from None
    return DataSpec(path=source, format=kind, staged_copy=staged_path(source) if stage else None)


def declared_dataset(system: SystemSpec, data_dir: str | None, *, stage: bool) -> DataSpec | None:
    """--data DIR on a file system the system profile declares (`storage:`) that this host does not see (a
    node-local NVMe, a cluster's Lustre seen from elsewhere): taken as the profile says; None otherwise."""
    if data_dir is None or stage or Path(data_dir).is_dir():
        return None
    path = os.path.normpath(data_dir)
    if any(path == fs.path or path.startswith(fs.path.rstrip("/") + "/") for fs in system.storage.values()):
        return DataSpec(path=path, format="unknown")
    return None


def fabric_name(system: SystemSpec, fabric: str | None) -> str:
    """--fabric (one of the system's), else the system's default (its first fabric for `auto`)."""
    if fabric is None:
        return system.default_fabric if system.default_fabric != "auto" else system.fabrics[0]
    check_fabric_name(fabric)
    if fabric not in system.fabrics:
        raise UsageError(f"--fabric {fabric} is not a fabric of system {system.name!r}; "
                         f"valid: {', '.join(system.fabrics)}")
    return fabric


def fabric_devices(system: SystemSpec, fabric: str, device: str) -> list[str]:
    return fabric_settings(fabric, system.fabric_config.get(fabric), device=device).devices


def scheduler_options(base: SchedulerOptions, *, partition: str | None, account: str | None,
                      time_limit: str | None, exclusive: bool | None,
                      nodelist: str | None = None) -> SchedulerOptions:
    hosts = None if nodelist is None else [host.strip() for host in nodelist.split(",")]
    changes = {key: value for key, value in (("partition", partition), ("account", account),
                                             ("time", time_limit), ("exclusive", exclusive), ("nodelist", hosts))
               if value is not None}
    if not changes:
        return base
    try:
        return SchedulerOptions(**{**base.model_dump(), **changes})
    except ValidationError as exc:
        err = exc.errors()[0]
        option = {"time": "--time"}.get(str(err["loc"][0]), f"--{err['loc'][0]}")
        value = changes.get(str(err["loc"][0]))
        if option == "--nodelist":
            raise UsageError(f"bad --nodelist {nodelist!r}: {str(err['msg']).removeprefix('Value error, ')}; "
                             "valid: host names separated by commas, one per node") from None
        if option == "--time" and err["type"] == "value_error":  # the time-limit reader says what is wrong
            raise UsageError(f"bad --time {value!r}: {str(err['msg']).removeprefix('Value error, ')}") from None
        raise UsageError(f"bad {option} {value!r}; valid: "
                         + (TIME_FORMS if option == "--time"
                            else "letters, digits and _ . , : + = @ % / -, not starting with -")) from None
