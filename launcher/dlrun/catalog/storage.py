"""A system's file systems (`storage:` in a system profile): where each is mounted and what it is, so that an
experiment's `storage` axis value (nvme, lustre) becomes the `--data` directory a storage run reads."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class FileSystem(BaseModel):
    """One file system of a system's nodes: a directory on it that runs may read, its type, its source."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str = Field(pattern=r"^/[A-Za-z0-9_.,:+=@%/-]*$", description=(
        "A directory on the file system (absolute): the `--data` of a run that reads from it."))
    fs_type: str = Field(pattern=r"^[a-z0-9_.]+$", description=(
        "The file system's type as /proc/self/mountinfo names it (xfs, lustre, gpfs, ext4, ...)."))
    description: str = Field(default="", description="The file system in words.")
    source: str = Field(description=(
        "Where the mount and its type come from (document, section), or `site` for a site's own."))


def check_storage_fields(work) -> None:
    """`storage_test` belongs to kind storage, which needs it."""
    if (work.kind == "storage") != (work.storage_test is not None):
        raise ValueError("a storage workload needs `storage_test` (sequential or small-files)" if work.kind
                         == "storage" else f"kind {work.kind} reads no storage: leave out `storage_test`")
