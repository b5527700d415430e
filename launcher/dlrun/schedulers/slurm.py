"""`slurm`: an sbatch script (#SBATCH nodes, tasks per node, GPUs per node, CPUs per task, exclusive, time,
partition, account), submitted with `sbatch --parsable`; state from `scontrol show job` (works without
accounting), cancelled with `scancel`. The job's own output is `slurm-<id>.out` in the run directory."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Literal, Mapping

from pydantic import Field

from dlrun.catalog.models import DIRECTIVE_WORD
from dlrun.job import JobState, Launch, RankCommand, RenderedJob
from dlrun.launchers.base import mca_env
from dlrun.plan import Plan
from dlrun.registry import SCHEDULERS, Tool
from dlrun.schedulers.base import OwnSchedulerOptions, Scheduler, SchedulerError, own_options, run_tool
from dlrun.shell import join

SLURM_STATES = {
    "PENDING": "pending", "CONFIGURING": "pending", "REQUEUED": "pending", "RESV_DEL_HOLD": "pending",
    "REQUEUE_FED": "pending", "REQUEUE_HOLD": "pending", "SUSPENDED": "running", "STOPPED": "running",
    "RUNNING": "running", "COMPLETING": "running", "SIGNALING": "running", "STAGE_OUT": "running",
    "RESIZING": "running",
    "COMPLETED": "completed", "CANCELLED": "cancelled", "TIMEOUT": "timeout", "DEADLINE": "timeout",
    "FAILED": "failed", "NODE_FAIL": "failed", "BOOT_FAIL": "failed", "OUT_OF_MEMORY": "failed",
    "PREEMPTED": "failed", "REVOKED": "failed", "SPECIAL_EXIT": "failed",
}


class SlurmOptions(OwnSchedulerOptions):
    """Slurm's own settings in a system's `scheduler_options`."""

    qos: str | None = Field(default=None, pattern=DIRECTIVE_WORD,
                            description="The quality of service the job asks for (`#SBATCH --qos=`).")
    constraint: str | None = Field(default=None, pattern=DIRECTIVE_WORD,
                                   description="Node features the job's nodes must have (`#SBATCH --constraint=`).")
    reservation: str | None = Field(default=None, pattern=DIRECTIVE_WORD,
                                    description="The reservation the job runs in (`#SBATCH --reservation=`).")
    gpu_request: Literal["gpus-per-node", "gres"] = Field(
        default="gpus-per-node",
        description="How the job asks for GPUs: `--gpus-per-node=N` (Slurm 19.05 and later) or `--gres=gpu:N`.")
    srun_mpi: str = Field(default="pmix", pattern=r"^[a-z0-9_]+$",
                          description="The MPI plugin `srun --mpi=` starts the ranks with (dlrun.launchers.srun).")


def sbatch_directives(plan: Plan, launch: Launch | None = None) -> list[str]:
    opts = own_options(SlurmOptions, plan)
    per_node_tasks = (launch.tasks_per_node if launch else None) or plan.ranks_per_node
    cpus = plan.threads_per_rank * plan.ranks_per_node // per_node_tasks
    lines = [f"--job-name={plan.job_name}", f"--nodes={plan.nodes}", f"--ntasks-per-node={per_node_tasks}",
             f"--cpus-per-task={cpus}"]
    if plan.device == "cuda":
        gpus = plan.system.gpus_per_node
        lines.append(f"--gpus-per-node={gpus}" if opts.gpu_request == "gpus-per-node" else f"--gres=gpu:{gpus}")
    if opts.exclusive:
        lines.append("--exclusive")
    if opts.hhmmss():
        lines.append(f"--time={opts.hhmmss()}")
    for key in ("partition", "account", "qos", "constraint", "reservation"):
        value = getattr(opts, key)
        if value:
            lines.append(f"--{key}={value}")
    if opts.nodelist:
        lines.append(f"--nodelist={','.join(opts.nodelist)}")
    lines += ["--output=slurm-%j.out", "--error=slurm-%j.out", *opts.extra]
    return [f"#SBATCH {line}" for line in lines]


def parse_scontrol_job(text: str) -> JobState:
    fields = dict(re.findall(r"(\w+)=(\S*)", text))
    raw_state = fields.get("JobState", "")
    state = SLURM_STATES.get(raw_state.split("+")[0], "unknown")
    exit_code = None
    match = re.match(r"(\d+):(\d+)", fields.get("ExitCode", ""))
    if match:
        code, signal = int(match.group(1)), int(match.group(2))
        exit_code = code if code or not signal else 128 + signal
    reason = fields.get("Reason")
    return JobState(state=state, exit_code=exit_code, reason=None if reason in (None, "None") else reason,
                    raw=raw_state)


@SCHEDULERS.register("slurm")
class SlurmScheduler(Scheduler):
    tool = Tool("sbatch", "the Slurm client (Debian: apt-get install slurm-client)")
    batch = True
    takes_nodelist = True
    step_launchers = ("srun",)
    options = SlurmOptions
    run_dir_default = "${SLURM_SUBMIT_DIR}"

    def per_node_launch(self, plan: Plan, rank: RankCommand) -> Launch:
        argv = ["srun", f"--nodes={plan.nodes}", f"--ntasks={plan.nodes}", "--ntasks-per-node=1",
                f"--cpus-per-task={plan.threads_per_rank * plan.ranks_per_node}", "--kill-on-bad-exit=1",
                "--export=ALL", *rank.launcher_args, *rank.argv]
        return Launch(argv=argv, env={**mca_env(plan), **rank.env}, rank_log_pattern="output.log", tasks_per_node=1)

    def once_per_node(self, plan: Plan, argv: list[str]) -> list[str]:
        # A job step of one task per node (srun waits for every node's task).
        return [join(self.per_node_launch(plan, RankCommand(argv=argv)).argv)]

    def per_node_background(self, plan: Plan, argv: list[str]) -> str | None:
        if plan.nodes == 1:
            return super().per_node_background(plan, argv)
        # --overlap (Slurm >= 20.11): the step shares the nodes' CPUs and GPUs with the job's launch instead
        # of holding them until it ends.
        return join(["srun", "--overlap", f"--nodes={plan.nodes}", f"--ntasks={plan.nodes}", "--ntasks-per-node=1",
                     "--cpus-per-task=1", "--kill-on-bad-exit=0", "--export=ALL", *argv])

    def cluster_view(self):
        from dlrun.schedulers.slurm_view import cluster_view

        return cluster_view()

    def node_list_shell(self) -> str:
        return 'scontrol show hostnames "${SLURM_JOB_NODELIST}"'

    def allocated_nodes(self, environ: Mapping[str, str]) -> list[str] | None:
        nodelist = environ.get("SLURM_JOB_NODELIST")
        if not nodelist:
            return None
        proc = run_tool(["scontrol", "show", "hostnames", nodelist], env=dict(environ))
        if proc.returncode != 0:
            raise SchedulerError(f"scontrol show hostnames {nodelist}: {proc.stderr.strip() or proc.returncode}")
        return proc.stdout.split()

    def master_addr_shell(self, plan: Plan, launch: Launch) -> str:
        # Slurm runs the batch script on the first node of the allocation, where srun and mpirun (whose -H is
        # the node list above, in the same order) start rank 0. Its host name, not its Slurm node name: a
        # node name resolves only where the site made it a host name too.
        return "hostname"

    def render(self, plan: Plan, launch: Launch) -> RenderedJob:
        script = self.script(plan, launch, "Slurm batch job", sbatch_directives(plan, launch), exec_launch=False)
        return self.job(plan, launch, script, ["sbatch", "--parsable", "run.sh"])

    def submit(self, rendered: RenderedJob, run_path: Path, env: dict[str, str]) -> str:
        proc = run_tool(rendered.submit_argv, cwd=run_path, env=env)
        if proc.returncode != 0:
            raise SchedulerError(f"sbatch refused the job: {(proc.stderr or proc.stdout).strip()}")
        job_id = proc.stdout.strip().split(";")[0]
        if not job_id.isdigit():
            raise SchedulerError(f"sbatch printed {proc.stdout.strip()!r}, not a job id")
        return job_id

    def poll(self, job_id: str, run_path: Path) -> JobState:
        proc = run_tool(["scontrol", "show", "job", "-o", job_id])
        if proc.returncode != 0:
            if "Invalid job id" in proc.stderr:
                return JobState(state="unknown", reason="the controller no longer knows the job")
            raise SchedulerError(f"scontrol show job {job_id}: {proc.stderr.strip()}")
        return parse_scontrol_job(proc.stdout)

    def cancel(self, job_id: str) -> None:
        run_tool(["scancel", job_id])

    def output_files(self, job_id: str, run_path: Path) -> list[Path]:
        return [run_path / f"slurm-{job_id}.out"]
