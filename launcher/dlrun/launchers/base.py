from __future__ import annotations

from dataclasses import dataclass, field

from dlrun.plan import Plan
from dlrun.render import RankCommand


@dataclass(frozen=True)
class Launch:
    """The command that starts every rank, the environment to export first, and where rank logs go."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    rank_log_pattern: str = "logs/rank.{rank}/stdout"
    setup: list[str] = field(default_factory=list)  # shell lines to run before the launch (already quoted)


class Launcher:
    # Variables this launcher sets per rank on the host; containers must inherit them (RankCommand.passthrough).
    rank_env_names: tuple[str, ...] = ()
    rank_env_prefixes: tuple[str, ...] = ()

    def __init__(self, name: str):
        self.name = name

    def check(self, plan: Plan) -> None:
        """Raise UsageError when this launcher cannot start the plan's ranks (wrong scheduler, old image)."""

    def prepare(self, plan: Plan, rank: RankCommand) -> RankCommand:
        """Change the in-container command before the runtime wraps it (torchrun runs inside the image)."""
        return rank

    def wrap(self, plan: Plan, rank: RankCommand) -> Launch:
        raise NotImplementedError


# Runs on the host (or in the container under pyxis/torchrun) in front of each rank: one GPU per rank from
# the local rank, and CPU binding to that GPU's NUMA node when the system profile knows it. Constant text:
# only the NUMA map (integers from the validated profile) is filled in.
AFFINITY_SCRIPT = (
    "lr=${LOCAL_RANK:-${OMPI_COMM_WORLD_LOCAL_RANK:-${SLURM_LOCALID:-${MPI_LOCALRANKID:-0}}}}; "
    'IFS=, read -r -a gpus <<< "${CUDA_VISIBLE_DEVICES:-}"; '
    'if [ "${#gpus[@]}" -gt 0 ]; then gpu=${gpus[lr % ${#gpus[@]}]}; else gpu=$lr; fi; '
    'export CUDA_VISIBLE_DEVICES="$gpu"; '
    "numa=(@NUMA@); node=\"\"; "
    'case "$gpu" in (*[!0-9]*) ;; (*) node=${numa[gpu]:-} ;; esac; '
    'if [ -n "$node" ] && command -v taskset >/dev/null '
    '&& cpus=$(cat "/sys/devices/system/node/node${node}/cpulist" 2>/dev/null); '
    'then exec taskset -c "$cpus" "$@"; fi; '
    'exec "$@"'
)
AFFINITY_ARG0 = "dlrun-rank"


def numa_map(plan: Plan) -> list[int] | None:
    gpus = plan.system.gpus
    return list(gpus.numa_affinity) if gpus and gpus.numa_affinity else None


def gpu_affinity_argv(plan: Plan) -> list[str]:
    """`bash -c AFFINITY dlrun-rank` for GPU plans (one rank per GPU); nothing on CPU."""
    if plan.device != "cuda":
        return []
    numa = numa_map(plan) or []
    return ["bash", "-c", AFFINITY_SCRIPT.replace("@NUMA@", " ".join(str(int(n)) for n in numa)), AFFINITY_ARG0]


def hosts_setup(plan: Plan, slots: int) -> list[str]:
    """Shell lines that set DLRUN_HOSTS to `host:slots,...` from the scheduler's allocation."""
    from dlrun.registry import SCHEDULERS

    nodes = SCHEDULERS.get(plan.scheduler).node_list_shell()
    return [f"DLRUN_HOSTS=$({nodes} | sed 's/$/:{int(slots)}/' | paste -sd, -)"]


def require_scheduler(launcher: str, plan: Plan, allowed: tuple[str, ...]) -> None:
    if plan.scheduler not in allowed:
        from dlrun.errors import UsageError

        raise UsageError(f"launcher {launcher} needs scheduler {' or '.join(allowed)}, but the plan uses "
                         f"{plan.scheduler}; valid: --scheduler {allowed[0]}, or another --launcher")


def require_no_launcher_args(launcher: str, rank: RankCommand) -> None:
    if rank.launcher_args:
        from dlrun.errors import UsageError

        raise UsageError(f"launcher {launcher} cannot take the runtime's launcher flags {list(rank.launcher_args)}; "
                         "valid: --launcher srun")
