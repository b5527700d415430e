"""The batch job settings of a system profile (`scheduler_options`): those every scheduler takes, the base of a
scheduler's own, and the check of a system's settings against its scheduler's."""
from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from dlrun.catalog.time_limits import time_limit_seconds
from dlrun.errors import DlrunError
from dlrun.registry import SCHEDULERS

# Words that land in scheduler directives (#SBATCH, #BSUB, #PBS), which no shell quoting protects. A leading
# `-` would make the value the next option (`#BSUB -q -x` asks for exclusive nodes, not queue "-x").
DIRECTIVE_WORD = r"^[A-Za-z0-9_.,:+=@%/][A-Za-z0-9_.,:+=@%/-]*$"
#: A node's host name as schedulers take it in a node list.
HOST_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}"


def all_match(values, pattern: str, what: str):
    """`values` (or a mapping's keys) when each matches `pattern` whole; else ValueError naming the first
    that does not, as `what` says a valid one looks."""
    for item in values:
        if not re.fullmatch(pattern, item):
            raise ValueError(f"{item!r} is not {what}")
    return values


class SchedulerOptions(BaseModel):
    """Batch job settings every scheduler takes. Values go into scheduler directives, so they are restricted
    to plain words. A scheduler's own settings (Slurm's qos and srun_mpi, LSF's alloc flags, a Kubernetes
    namespace) are declared by the scheduler (`Scheduler.options`, a subclass) and ride here as extra fields:
    a system's are checked against its scheduler when the system is loaded (`own_scheduler_options`)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    partition: str | None = Field(default=None, pattern=DIRECTIVE_WORD, description=(
        "The batch partition (Slurm) or queue (LSF, PBS) jobs ask for unless --partition names one."))
    account: str | None = Field(default=None, pattern=DIRECTIVE_WORD, description=(
        "The account or project jobs are charged to (Slurm --account, LSF -P, PBS -A) unless --account names one."))
    time: str | None = Field(default="00:30:00", pattern=r"^(\d+-)?\d+(:\d{2}){0,2}$", description=(
        "Wall-clock limit unless --time: MINUTES, HH:MM, HH:MM:SS or D-HH:MM:SS; a dead rank never holds "
        "nodes longer."))
    exclusive: bool = Field(default=False, description="Ask for whole nodes unless --exclusive/--shared says.")
    extra: list[str] = Field(default=[], description="Further scheduler flags, as given, e.g. --mem=0.")
    nodelist: list[str] = Field(default=[], description=(
        "The job's nodes by host name, as many as it has nodes (Slurm --nodelist, LSF -m, PBS host=), unless "
        "--nodelist names them; empty: the scheduler picks them."))

    @field_validator("time")
    @classmethod
    def _a_limit(cls, value: str | None) -> str | None:
        if value is not None:
            time_limit_seconds(value)  # every field within its range, the whole within MAX_TIME_LIMIT_S
        return value

    @field_validator("extra")
    @classmethod
    def _directive_flags(cls, value: list[str]) -> list[str]:
        return all_match(value, r"-{1,2}[A-Za-z][A-Za-z0-9_-]*(=[A-Za-z0-9_.,:+=@%/-]+)?",
                         "a plain scheduler flag (like --mem=0)")

    @field_validator("nodelist")
    @classmethod
    def _host_names(cls, value: list[str]) -> list[str]:
        all_match(value, HOST_NAME, "a host name (letters, digits, . _ -; one per node, no ranges)")
        if len(set(value)) != len(value):
            raise ValueError(f"{','.join(value)!r} names a node twice")
        return value

    def time_seconds(self) -> int | None:
        """The limit in seconds (`time_limit_seconds`)."""
        return None if self.time is None else time_limit_seconds(self.time)

    def time_minutes(self) -> int | None:
        """The limit in whole minutes, rounded up: a batch limit is never shorter than the one asked for."""
        seconds = self.time_seconds()
        return None if seconds is None else -(-seconds // 60)

    def hhmmss(self) -> str | None:
        minutes = self.time_minutes()
        return None if minutes is None else f"{minutes // 60:02d}:{minutes % 60:02d}:00"


class OwnSchedulerOptions(SchedulerOptions):
    """The base of a scheduler's own options model: its fields and the common ones, nothing else."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def own_scheduler_options(scheduler: str, options: SchedulerOptions) -> SchedulerOptions:
    """`options` checked against the options `scheduler` declares, its defaults filled in. A name that is
    no scheduler (or one that cannot load here) is left to the plan, which refuses it when it is chosen."""
    try:
        model = SCHEDULERS.get_class(scheduler).options
    except DlrunError:
        return options
    try:
        own = model.model_validate(options.model_dump())
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(part) for part in err["loc"])
        takes = ", ".join(sorted(model.model_fields))
        raise ValueError(f"{field}: {err['msg']} (scheduler {scheduler} takes {takes})") from None
    return SchedulerOptions(**own.model_dump())
