"""`srun` (Slurm), PMIx: Slurm starts every rank itself, `--kill-on-bad-exit=1` ends the step as soon as
one rank fails (no hang), one output file per rank. With the enroot runtime, pyxis flags go here.

The PMI (`--mpi=`) is the Slurm option `srun_mpi` (dlrun.schedulers.slurm). A failed rank is read from srun's
own `srun: error: HOST: task N: ...` line, as its users published it (tests/data/logs/launcher-failures)."""
from __future__ import annotations

import re
import signal

from dlrun.job import RUN_DIR_VAR, Launch, RankCommand, RankFailure
from dlrun.launchers.base import Launcher, PmiRequest, SchedulerView, gpu_affinity_argv, mca_env, numa_map
from dlrun.plan import Plan
from dlrun.registry import LAUNCHERS, Tool
from dlrun.shell import Expand

SLURM_RANK_ENV = ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_NTASKS", "SLURM_STEP_ID",
                  "SLURM_JOB_ID", "PMIX_RANK", "PMIX_NAMESPACE", "CUDA_VISIBLE_DEVICES")
SLURM_RANK_PREFIXES = ("SLURM_", "PMIX_", "PMI_", "OMPI_")
#: srun's --mpi under a scheduler whose options have no `srun_mpi` (Slurm's own options default to it too).
DEFAULT_SRUN_MPI = "pmix"
# (`.*\S\s*$`, not `.+?\s*$`: a lazy match before `\s*$` retries the spaces of a long line at every character)
# (`\d+(?:[-,][-,\d]*)?`, not `\d+[-,\d]*`: two neighbours that both take digits split a long run every way)
SRUN_TASK = re.compile(r"^srun: error: (?P<host>[^\s:]+): tasks? (?P<rank>\d+)(?:[-,][-,\d]*)?: (?P<what>.*\S)\s*$",
                       re.MULTILINE)
SRUN_EXIT = re.compile(r"Exited with exit code (\d+)")
#: strsignal() text -> signal number: srun prints the text (`srun: error: n1: task 1: Killed`).
SIGNAL_TEXT = {signal.strsignal(sig).lower(): int(sig) for sig in signal.Signals
               if signal.strsignal(sig) and not signal.strsignal(sig).startswith(("Unknown", "Real-time"))}


def rank_dirs_setup(world_size: int) -> list[str]:
    # srun opens --output files itself but does not create their directories.
    return [f'mkdir -p "${{{RUN_DIR_VAR}}}"/logs/rank.{{0..{world_size - 1}}}']


@LAUNCHERS.register("srun")
class SrunLauncher(Launcher):
    tool = Tool("srun", "the Slurm client (Debian: apt-get install slurm-client)")
    rank_env_names = SLURM_RANK_ENV
    rank_env_prefixes = SLURM_RANK_PREFIXES
    starts_mpi_programs = True
    rank_output_in_job_log = False  # --output: each rank's own file

    def pmi_request(self, plan: Plan, scheduler: SchedulerView) -> PmiRequest:
        plugin = getattr(scheduler.options_for(plan), "srun_mpi", None) or DEFAULT_SRUN_MPI
        return PmiRequest(plugin, f"srun --mpi={plugin}", "scheduler_options.srun_mpi")

    def rank_failure(self, text: str) -> RankFailure | None:
        match = SRUN_TASK.search(text)
        if not match:
            return None
        rank, host, what = int(match.group("rank")), match.group("host"), match.group("what")
        code = SRUN_EXIT.match(what)
        if code:
            return RankFailure("srun", rank, host, exit_code=int(code.group(1)))
        signum = SIGNAL_TEXT.get(what.split(" (")[0].strip().lower())
        return RankFailure("srun", rank, host, signal=signum, detail=None if signum else what)

    def supports(self, scheduler: SchedulerView) -> bool:
        return self.name in scheduler.step_launchers

    def wrap(self, plan: Plan, rank: RankCommand, scheduler: SchedulerView) -> Launch:
        argv = ["srun", f"--mpi={self.pmi_request(plan, scheduler).plugin}", f"--nodes={plan.nodes}",
                f"--ntasks={plan.world_size}", f"--ntasks-per-node={plan.ranks_per_node}",
                f"--cpus-per-task={plan.threads_per_rank}", "--kill-on-bad-exit=1", "--export=ALL",
                Expand("--output=${" + RUN_DIR_VAR + "}/logs/rank.%t/stdout"),
                Expand("--error=${" + RUN_DIR_VAR + "}/logs/rank.%t/stderr")]
        if numa_map(plan) and gpu_affinity_argv(plan):
            argv.append("--cpu-bind=none")  # each rank binds itself to its GPU's NUMA node
        argv += list(rank.launcher_args) + list(plan.launcher_args)
        argv += gpu_affinity_argv(plan) + rank.argv
        return Launch(argv=argv, env={**mca_env(plan), **rank.env}, rank_log_pattern="logs/rank.{rank}/stdout",
                      setup=rank_dirs_setup(plan.world_size))
