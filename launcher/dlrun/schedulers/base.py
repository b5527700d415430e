"""Schedulers turn a launch into a submission (script text + how to start it); batch schedulers also
submit, report the job's state, and cancel it, so that one executor drives every one of them."""
from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from dlrun.errors import DlrunError
from dlrun.launchers.base import Launch
from dlrun.plan import Plan
from dlrun.render import RUN_DIR_VAR, RenderedJob, fabric_for, join, quote, script_header

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


class SchedulerError(DlrunError):
    """A scheduler command failed (submission refused, controller unreachable)."""


def export_lines(env: dict[str, str]) -> list[str]:
    return [f"export {name}={quote(value)}" for name, value in sorted(env.items())]


def run_tool(argv: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None,
             stdin_path: Path | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    try:
        stdin = open(stdin_path) if stdin_path else subprocess.DEVNULL
        try:
            return subprocess.run(argv, cwd=cwd, env=env, stdin=stdin, capture_output=True, text=True,
                                  timeout=timeout)
        finally:
            if stdin_path:
                stdin.close()  # type: ignore[union-attr]
    except FileNotFoundError:
        raise SchedulerError(f"{argv[0]} not found on PATH; install the scheduler's client tools or run "
                             f"`dlrun doctor` on a login node of the system") from None
    except subprocess.TimeoutExpired:
        raise SchedulerError(f"{' '.join(argv)} did not answer within {timeout:.0f} s") from None


class Scheduler:
    batch = False        # True: submit, then poll until the job is done
    runs_image = False   # True: the scheduler starts the image itself (Kubernetes pods); no runtime wrap
    run_dir_default = '$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)'

    def __init__(self, name: str):
        self.name = name

    def check(self, plan: Plan) -> None:
        """Raise UsageError when the plan cannot run under this scheduler."""

    def render(self, plan: Plan, launch: Launch) -> RenderedJob:
        raise NotImplementedError

    def node_list_shell(self) -> str:
        """A shell command printing the job's hosts, one per line."""
        return "hostname"

    # batch interface -------------------------------------------------------------------------------
    def submit(self, rendered: RenderedJob, run_path: Path, env: dict[str, str]) -> str:
        raise NotImplementedError

    def poll(self, job_id: str, run_path: Path) -> JobState:
        raise NotImplementedError

    def cancel(self, job_id: str) -> None:
        raise NotImplementedError

    def output_files(self, job_id: str, run_path: Path) -> list[Path]:
        """The job's own stdout/stderr files (not the per-rank logs)."""
        return []

    # shared script text ------------------------------------------------------------------------------
    def script(self, plan: Plan, launch: Launch, title: str, directives: list[str], *, exec_launch: bool) -> str:
        header = script_header(plan, title)
        lines = [header[0], *directives, *header[1:],
                 "set -euo pipefail",
                 f': "${{{RUN_DIR_VAR}:={self.run_dir_default}}}"',
                 f"export {RUN_DIR_VAR}",
                 f'cd "${{{RUN_DIR_VAR}}}"',
                 f'mkdir -p "${{{RUN_DIR_VAR}}}/logs"']
        if plan.nodes > 1:
            # Batch scripts run on the first node of the allocation, where rank 0 starts.
            lines += ["DLRUN_MASTER_ADDR=$(hostname)", "export DLRUN_MASTER_ADDR"]
        lines += [*fabric_for(plan).setup, *launch.setup, *export_lines(launch.env)]
        lines.append(("exec " if exec_launch else "") + join(launch.argv))
        return "\n".join(lines) + "\n"

    def job(self, plan: Plan, launch: Launch, script: str, submit_argv: list[str],
            submit_stdin: str | None = None) -> RenderedJob:
        return RenderedJob(script=script, submit_argv=submit_argv, scheduler=self.name,
                           rank_log_pattern=launch.rank_log_pattern, submit_stdin=submit_stdin)
