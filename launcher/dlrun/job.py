"""What rendering produces and executing consumes: one rank's command, the launch of all ranks, the
rendered job, a batch job's state, and a failed rank as its launcher reported it. Plain data shared by the
backends, render and execute."""
from __future__ import annotations

import signal
from dataclasses import dataclass, field
from typing import Any

#: The variable every rendered script and every rank sees: the run directory (absolute).
RUN_DIR_VAR = "DLRUN_RUN_DIR"


@dataclass(frozen=True)
class RankCommand:
    """One rank's command and the environment every rank must see.

    Contract for container runtimes: `env` must be visible inside the container with these values;
    `passthrough` names (and names starting with `passthrough_prefixes`) are set per rank by the launcher
    on the host (rank ids, PMIx contact, CUDA_VISIBLE_DEVICES) and must be inherited from the host process
    as they are. Runtimes that run inside the launcher (pyxis) return flags for it in `launcher_args`.
    """

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    passthrough: tuple[str, ...] = ()
    passthrough_prefixes: tuple[str, ...] = ()
    launcher_args: tuple[str, ...] = ()

    def with_argv(self, argv: list[str], **changes) -> "RankCommand":
        """The same rank with another command (and any other field changed)."""
        return RankCommand(argv=argv, env=changes.get("env", self.env), passthrough=self.passthrough,
                           passthrough_prefixes=self.passthrough_prefixes,
                           launcher_args=changes.get("launcher_args", self.launcher_args))


@dataclass(frozen=True)
class Launch:
    """The command that starts every rank, the environment to export first, and where rank logs go."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    rank_log_pattern: str = "logs/rank.{rank}/stdout"
    setup: list[str] = field(default_factory=list)  # shell lines to run before the launch (already quoted)
    tasks_per_node: int | None = None  # processes the scheduler starts per node (None: one per rank)
    whole_nodes: bool = False          # the step launcher takes whole nodes (LSF/CSM `-nnodes`)


@dataclass(frozen=True)
class RuleFinding:
    """What a rule of dlrun.jobcheck found in a rendered job: a refusal (the rule, the numbers, the fix), or an
    assumption only the hardware can confirm (said in the job as a comment and recorded with the run)."""

    rule: str
    message: str
    fix: str | None = None
    assumption: bool = False

    def line(self) -> str:
        return f"rule {self.rule}: {self.message}" + (f"; fix: {self.fix}" if self.fix else "")


@dataclass(frozen=True)
class RenderedJob:
    script: str                 # bash text; the executor runs exactly this
    submit_argv: list[str]      # how to start the script (relative to the run directory)
    scheduler: str
    rank_log_pattern: str       # where per-rank stdout lands, relative to the run directory
    files: dict[str, str] = field(default_factory=dict)  # extra files to stage in the run directory
    submit_stdin: str | None = None  # a staged file the submit command reads on stdin (`bsub < run.sh`)
    findings: tuple[RuleFinding, ...] = ()  # the rules' refusals and assumptions (dlrun.jobcheck)
    facts: Any = None  # what the rules read (dlrun.jobcheck.facts.JobFacts)

    @property
    def refusals(self) -> tuple[RuleFinding, ...]:
        return tuple(f for f in self.findings if not f.assumption)

    @property
    def assumptions(self) -> tuple[RuleFinding, ...]:
        return tuple(f for f in self.findings if f.assumption)


DONE_STATES = ("completed", "failed", "cancelled", "timeout")


@dataclass(frozen=True)
class JobState:
    state: str  # pending | running | completed | failed | cancelled | timeout | unknown
    exit_code: int | None = None
    reason: str | None = None
    raw: str | None = None

    @property
    def done(self) -> bool:
        return self.state in DONE_STATES


def signal_label(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


@dataclass(frozen=True)
class RankFailure:
    """One rank's end as its launcher reported it (`Launcher.rank_failure`)."""

    launcher: str  # the tool that reported it, as it names itself (mpirun, mpiexec, srun, torchrun)
    rank: int
    host: str | None
    signal: int | None = None
    exit_code: int | None = None
    detail: str | None = None  # the launcher's words when they name neither a signal nor an exit code

    def describe(self) -> str:
        where = f"rank {self.rank}" + (f" on host {self.host}" if self.host else "")
        if self.signal is not None:
            what = f"was killed by signal {self.signal} ({signal_label(self.signal)})"
        elif self.exit_code is not None:
            what = f"exited with code {self.exit_code}"
        else:
            what = f"ended: {self.detail}"
        return f"{where} {what}, as {self.launcher} reports"
