"""`pbs` (PBS Pro / OpenPBS): a qsub script (`select=N:ncpus:ngpus:mpiprocs`, walltime, queue, account),
ranks started with `mpiexec` (see the mpirun launcher), state from `qstat -fx`, cancelled with `qdel`."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Mapping

from dlrun.job import JobState, Launch, RankCommand, RenderedJob
from dlrun.launchers.mpirun import mpirun_argv, mpirun_hosts, root_ok
from dlrun.plan import Plan
from dlrun.registry import SCHEDULERS, Tool
from dlrun.schedulers.base import Scheduler, SchedulerError, run_tool
from dlrun.shell import join

PBS_STATES = {"Q": "pending", "H": "pending", "W": "pending", "T": "pending", "S": "running", "R": "running",
              "E": "running", "B": "running", "X": "completed", "F": "completed"}


def pbs_directives(plan: Plan) -> list[str]:
    opts = plan.scheduler_options
    cores = plan.threads_per_rank * plan.ranks_per_node
    chunk = f"ncpus={cores}:mpiprocs={plan.ranks_per_node}"
    if plan.device == "cuda":
        chunk += f":ngpus={plan.system.gpus_per_node}"
    # Named nodes: one chunk per host (`select=1:host=a:...+1:host=b:...`), else N chunks anywhere.
    select = ("select=" + "+".join(f"1:host={host}:{chunk}" for host in opts.nodelist) if opts.nodelist
              else f"select={plan.nodes}:{chunk}")
    lines = [f"-N {plan.job_name}", f"-l {select}", "-l place=scatter" + (":excl" if opts.exclusive else "")]
    if opts.hhmmss():
        lines.append(f"-l walltime={opts.hhmmss()}")
    if opts.partition:
        lines.append(f"-q {opts.partition}")
    if opts.account:
        lines.append(f"-A {opts.account}")
    if plan.secret_names:
        # qsub passes only what -v names; without a value, it takes each from the environment of qsub.
        lines.append("-v " + ",".join(sorted(plan.secret_names)))
    lines += ["-j oe", "-o pbs.out", *opts.extra]
    return [f"#PBS {line}" for line in lines]


def parse_qstat(text: str) -> JobState:
    state_match = re.search(r"job_state\s*=\s*(\w)", text)
    exit_match = re.search(r"Exit_status\s*=\s*(-?\d+)", text)
    raw = state_match.group(1) if state_match else ""
    state = PBS_STATES.get(raw, "unknown")
    code = int(exit_match.group(1)) if exit_match else None
    if state == "completed" and code not in (None, 0):
        # PBS: negative = the job never ran; > 256 = killed by signal (code - 256), e.g. qdel -> 271.
        state = "cancelled" if code in (271, 265) else "failed"
    return JobState(state=state, exit_code=code, raw=raw)


@SCHEDULERS.register("pbs")
class PbsScheduler(Scheduler):
    tool = Tool("qsub", "the PBS client")
    batch = True
    takes_nodelist = True
    mpirun_command = "mpiexec"
    run_dir_default = "${PBS_O_WORKDIR}"

    def cluster_view(self):
        from dlrun.schedulers.pbs_view import cluster_view

        return cluster_view()

    def per_node_launch(self, plan: Plan, rank: RankCommand) -> Launch:
        hosts, setup = mpirun_hosts(self, 1)
        argv = mpirun_argv(plan, self, sorted(rank.env), hosts, np=plan.nodes) + rank.argv
        return Launch(argv=argv, env={**rank.env, **root_ok(plan)}, rank_log_pattern="logs/1/rank.{rank}/stdout",
                      setup=setup, tasks_per_node=1)

    def once_per_node(self, plan: Plan, argv: list[str]) -> list[str]:
        if plan.nodes == 1:
            return super().once_per_node(plan, argv)
        # pbsdsh -u: one task on each host of the job; it passes no PATH, so the program goes by full path.
        return ["pbsdsh -u " + join(["/bin/" + argv[0] if "/" not in argv[0] else argv[0], *argv[1:]])]

    def per_node_background(self, plan: Plan, argv: list[str]) -> str | None:
        if plan.nodes == 1:
            return super().per_node_background(plan, argv)
        return "pbsdsh -u " + join(["/usr/bin/env", *argv])  # pbsdsh passes no PATH; env searches the default

    def allocated_nodes(self, environ: Mapping[str, str]) -> list[str] | None:
        path = environ.get("PBS_NODEFILE")
        if not path:
            return None
        try:
            return list(dict.fromkeys(Path(path).read_text().split())) or None
        except OSError as exc:
            raise SchedulerError(f"PBS_NODEFILE {path}: {exc.strerror}") from None

    def node_list_shell(self) -> str:
        # One line per host in the node file's order: its first host (the mother superior, where the script
        # runs) is where mpiexec starts rank 0, and the rendezvous address. `sort -u` would reorder them.
        return "awk '!seen[$0]++' \"${PBS_NODEFILE}\""

    def render(self, plan: Plan, launch: Launch) -> RenderedJob:
        script = self.script(plan, launch, "PBS batch job", pbs_directives(plan), exec_launch=False)
        return self.job(plan, launch, script, ["qsub", "run.sh"])

    def submit(self, rendered: RenderedJob, run_path: Path, env: dict[str, str]) -> str:
        proc = run_tool(rendered.submit_argv, cwd=run_path, env=env)
        if proc.returncode != 0 or not proc.stdout.strip():
            raise SchedulerError(f"qsub refused the job: {(proc.stderr or proc.stdout).strip()}")
        return proc.stdout.strip().splitlines()[-1]

    def poll(self, job_id: str, run_path: Path) -> JobState:
        proc = run_tool(["qstat", "-fx", job_id])
        if proc.returncode != 0:
            raise SchedulerError(f"qstat -fx {job_id}: {proc.stderr.strip()}")
        return parse_qstat(proc.stdout)

    def cancel(self, job_id: str) -> None:
        run_tool(["qdel", job_id])

    def output_files(self, job_id: str, run_path: Path) -> list[Path]:
        return [run_path / "pbs.out"]
