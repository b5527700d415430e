"""`lsf` (IBM Spectrum LSF): a bsub script read on stdin (`bsub < run.sh`). With jsrun (Summit-class POWER9
systems under CSM) the allocation is whole nodes (`-nnodes`); otherwise slots (`-n`, `span[ptile=R]`).
State from `bjobs -o "stat exit_code"`, cancelled with `bkill`."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Mapping

from pydantic import Field

from dlrun.job import JobState, Launch, RankCommand, RenderedJob
from dlrun.plan import Plan
from dlrun.registry import SCHEDULERS, Tool
from dlrun.schedulers.base import OwnSchedulerOptions, Scheduler, SchedulerError, own_options, run_tool
from dlrun.shell import join

LSF_STATES = {"PEND": "pending", "PSUSP": "pending", "WAIT": "pending", "RUN": "running", "USUSP": "running",
              "SSUSP": "running", "PROV": "pending", "DONE": "completed", "EXIT": "failed", "ZOMBI": "failed",
              "UNKWN": "unknown"}


class LsfOptions(OwnSchedulerOptions):
    """LSF's own settings in a system's `scheduler_options`."""

    lsf_alloc_flags: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_ ]+$",
                                        description="`#BSUB -alloc_flags` words, e.g. `smt4` on a POWER9 node.")


def bsub_directives(plan: Plan, launch: Launch | None = None) -> list[str]:
    opts = own_options(LsfOptions, plan)
    lines = [f"-J {plan.job_name}"]
    if launch is not None and launch.whole_nodes:
        lines.append(f"-nnodes {plan.nodes}")
    else:
        lines += [f"-n {plan.world_size}", f'-R "span[ptile={plan.ranks_per_node}]"']
        if plan.device == "cuda":
            lines.append(f'-gpu "num={plan.system.gpus_per_node}"')
    minutes = opts.time_minutes()
    if minutes:
        lines.append(f"-W {minutes // 60:d}:{minutes % 60:02d}")
    if opts.account:
        lines.append(f"-P {opts.account}")
    if opts.partition:
        lines.append(f"-q {opts.partition}")
    if opts.exclusive:
        lines.append("-x")
    if opts.nodelist:
        lines.append(f'-m "{" ".join(opts.nodelist)}"')
    if opts.lsf_alloc_flags:
        lines.append(f'-alloc_flags "{opts.lsf_alloc_flags}"')
    lines += ["-o lsf-%J.out", "-e lsf-%J.out", *opts.extra]
    return [f"#BSUB {line}" for line in lines]


def parse_bjobs(text: str) -> JobState:
    words = text.split()
    raw = words[0] if words else ""
    state = LSF_STATES.get(raw, "unknown")
    code = int(words[1]) if len(words) > 1 and words[1].lstrip("-").isdigit() else (0 if raw == "DONE" else None)
    return JobState(state=state, exit_code=code, raw=raw)


@SCHEDULERS.register("lsf")
class LsfScheduler(Scheduler):
    tool = Tool("bsub", "the LSF client")
    batch = True
    takes_nodelist = True
    step_launchers = ("jsrun",)
    options = LsfOptions
    run_dir_default = "${LS_SUBCWD}"

    def cluster_view(self):
        from dlrun.schedulers.lsf_view import cluster_view

        return cluster_view()

    def once_per_node(self, plan: Plan, argv: list[str]) -> list[str]:
        if plan.nodes == 1:
            return super().once_per_node(plan, argv)
        return [join(self.per_node_launch(plan, RankCommand(argv=argv)).argv)]  # one resource set per host

    def per_node_background(self, plan: Plan, argv: list[str]) -> str | None:
        if plan.nodes == 1 and plan.launcher != "jsrun":
            return super().per_node_background(plan, argv)
        # Under CSM (jsrun) the script runs on a launch node: jsrun reaches the compute hosts. One core and no
        # GPU per host: the job's own jsrun keeps the rest (NVML still reads every GPU).
        return join(["jsrun", "--nrs", str(plan.nodes), "--rs_per_host", "1", "--tasks_per_rs", "1",
                     "--cpu_per_rs", "1", "--gpu_per_rs", "0", "--smpiargs=off", *argv])

    def per_node_launch(self, plan: Plan, rank: RankCommand) -> Launch:
        argv = ["jsrun", "--nrs", str(plan.nodes), "--rs_per_host", "1", "--tasks_per_rs", "1",
                "--cpu_per_rs", "ALL_CPUS", "--gpu_per_rs", "ALL_GPUS", "--smpiargs=off", *rank.argv]
        return Launch(argv=argv, env=rank.env, rank_log_pattern="output.log", tasks_per_node=1, whole_nodes=True)

    def allocated_nodes(self, environ: Mapping[str, str]) -> list[str] | None:
        words = environ.get("LSB_MCPU_HOSTS", "").split()  # "host slots host slots ...", in allocation order
        return list(dict.fromkeys(words[::2])) or None

    def node_list_shell(self) -> str:
        # Hosts in allocation order, each once (the host file has one line per slot); `sort -u` would put
        # another host than rank 0's first.
        return "awk '!seen[$0]++' \"${LSB_DJOB_HOSTFILE}\""

    def master_addr_shell(self, plan: Plan, launch: Launch) -> str:
        if launch.whole_nodes:
            # LSF with CSM (jsrun): the script runs on a launch node that runs no rank; it is the host file's
            # first line. Rank 0 runs on the first compute host after it.
            return "awk 'NR == 1 { launch = $0; next } $0 != launch { print; exit }' \"${LSB_DJOB_HOSTFILE}\""
        return super().master_addr_shell(plan, launch)

    def compute_hosts_shell(self, plan: Plan, launch: Launch) -> str:
        if launch.whole_nodes:  # the launch node (the host file's first line) runs no process
            return "awk 'NR == 1 { launch = $0; next } $0 != launch && !seen[$0]++' \"${LSB_DJOB_HOSTFILE}\""
        return super().compute_hosts_shell(plan, launch)

    def render(self, plan: Plan, launch: Launch) -> RenderedJob:
        script = self.script(plan, launch, "LSF batch job", bsub_directives(plan, launch), exec_launch=False)
        return self.job(plan, launch, script, ["bsub"], submit_stdin="run.sh")

    def submit(self, rendered: RenderedJob, run_path: Path, env: dict[str, str]) -> str:
        proc = run_tool(rendered.submit_argv, cwd=run_path, env=env, stdin_path=run_path / "run.sh")
        match = re.search(r"Job <(\d+)>", proc.stdout)
        if proc.returncode != 0 or not match:
            raise SchedulerError(f"bsub refused the job: {(proc.stderr or proc.stdout).strip()}")
        return match.group(1)

    def poll(self, job_id: str, run_path: Path) -> JobState:
        proc = run_tool(["bjobs", "-noheader", "-o", "stat exit_code", job_id])
        if proc.returncode != 0:
            raise SchedulerError(f"bjobs {job_id}: {proc.stderr.strip()}")
        return parse_bjobs(proc.stdout)

    def cancel(self, job_id: str) -> None:
        run_tool(["bkill", job_id])

    def output_files(self, job_id: str, run_path: Path) -> list[Path]:
        return [run_path / f"lsf-{job_id}.out"]
