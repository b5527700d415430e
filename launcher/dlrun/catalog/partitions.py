"""A system's partitions: the GPU partition and the CPU partition of one site, each with its own node facts.

A system's own facts (nodes, cpu, memory, gpus, fabrics, scheduler options) describe its default partition; each
entry of `partitions` (named as the scheduler names the partition or queue) states where its nodes differ. A
section it states replaces the system's whole (a partition's `gpus` never inherits another GPU's NUMA affinity or
compute capability; `gpus: null` is a partition without GPUs), `fabric_config` is replaced fabric by fabric,
`scheduler_options` are merged key by key (the account and QoS carry over), and its `sources` are added to the
system's. As in ReFrame's systems/partitions model, a run names its partition (`--partition NAME`); the plan
then holds the partition's system (`merged`), so that every node model, render and check reads its nodes.

Nothing here imports the system's model: the merged system is built by the class of the system given, and
checked by it (a partition whose facts the schema refuses is refused when the system is loaded).
"""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_serializer

from dlrun.errors import UsageError, closest, unknown_name

#: The sections a partition may state, replacing the system's; scheduler_options and sources are merged.
REPLACED = ("description", "arch", "nodes", "cpu", "memory_gb", "gpus", "fabrics", "default_fabric")


class PartitionSpec(BaseModel):
    """Where one partition's nodes differ from the system's (values checked by the system's schema once merged)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    description: str | None = Field(default=None, description="The partition in words; replaces the system's.")
    arch: str | None = Field(default=None, description="Its nodes' CPU architecture; replaces the system's.")
    nodes: int | None = Field(default=None, gt=0, description="Its nodes; replaces the system's count.")
    cpu: dict[str, Any] | None = Field(default=None, description=(
        "The CPUs of one of its nodes (as the system's `cpu`); replaces the system's whole."))
    memory_gb: float | None = Field(default=None, gt=0, description="Memory of one of its nodes, GB.")
    gpus: dict[str, Any] | None = Field(default=None, description=(
        "The GPUs of one of its nodes (as the system's `gpus`), replacing the system's whole; `gpus: null`: "
        "its nodes have none."))
    fabrics: list[str] | None = Field(default=None, description="Its interconnects; replace the system's.")
    default_fabric: str | None = Field(default=None, description="Its default fabric; replaces the system's.")
    fabric_config: dict[str, dict[str, Any]] = Field(default={}, description=(
        "Fabric settings (as the system's `fabric_config`), replacing the system's fabric by fabric."))
    scheduler_options: dict[str, Any] = Field(default={}, description=(
        "Batch job settings merged key by key over the system's (the account carries over); its name is its "
        "key in `partitions`, never `partition` here."))
    sources: list[dict[str, Any]] = Field(default=[], description=(
        "Where its values come from (as the system's `sources`), added to the system's."))

    @model_serializer(mode="wrap")
    def _as_stated(self, handler):
        """What the partition states, and nothing it leaves to the system (`gpus: null` stays: none)."""
        return {key: value for key, value in handler(self).items() if key in self.model_fields_set}

    @field_validator("scheduler_options")
    @classmethod
    def _named_by_its_key(cls, value: dict[str, Any]) -> dict[str, Any]:
        if "partition" in value:
            raise ValueError("a partition's name is its key in `partitions`: leave out scheduler_options.partition")
        return value


def merged(system: Any, name: str) -> Any:
    """The system as partition `name`'s nodes are: its stated sections over the system's, `partition` set to it."""
    part: PartitionSpec = system.partitions[name]
    data = system.model_dump(exclude={"partitions"})
    for field in REPLACED:
        if field in part.model_fields_set:
            data[field] = getattr(part, field)
    data["fabric_config"] = {**data.get("fabric_config", {}), **part.fabric_config}
    data["scheduler_options"] = {**data.get("scheduler_options", {}), **part.scheduler_options, "partition": name}
    data["sources"] = [*data.get("sources", []), *part.sources]
    return type(system).model_validate({**data, "partitions": {}, "partition": name})


def names(system: Any) -> list[str]:
    """The partitions a run on `system` may name: its own (scheduler_options.partition) and those it lists."""
    own = system.scheduler_options.partition
    return sorted({*system.partitions, *([own] if own else [])})


def select(system: Any, partition: str | None) -> Any:
    """The system a run with `--partition` (None: not given) runs on: a listed partition's merged system; the
    system itself for its own partition, or on a system that lists none (any name then goes to the scheduler)."""
    if not system.partitions:
        return system
    chosen = partition if partition is not None else system.scheduler_options.partition
    if chosen is None or (chosen == system.scheduler_options.partition and chosen not in system.partitions):
        return system
    if chosen not in system.partitions:
        refusal = str(unknown_name("partition", chosen, names(system)))
        raise UsageError(refusal.replace(f"{chosen!r}", f"{chosen!r} of system {system.name!r}", 1))
    return merged(system, chosen)


def axis_problem(system: Any, partition: str) -> str | None:
    """Why an experiment's `partition` axis value cannot run on `system`, or None: a point names one of the
    partitions the system models (`names`), never one left to the scheduler, whose nodes dlrun would not know."""
    valid = names(system)
    if partition in valid:
        return None
    hint = closest(partition, valid)
    return (f"partition {partition!r} is not a partition of system {system.name!r}"
            + (f"; did you mean {hint!r}?" if hint else ";") + " valid: "
            + (", ".join(valid) or "none (it lists no partitions and names no scheduler_options.partition)"))


def check_all(system: Any) -> None:
    """Every partition of `system` merges into a system the schema accepts (ValueError naming the first that
    does not, and its field)."""
    for name in system.partitions:
        try:
            merged(system, name)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(part) for part in err["loc"])
            raise ValueError(f"partition {name}: {where}: {err['msg']}") from None
