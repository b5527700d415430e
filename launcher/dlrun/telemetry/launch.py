"""Where the telemetry sampler runs: its files in the run directory, its command, and the lines a batch
script uses to start one sampler per node before the launch and stop them when the script exits.

Local runs start the sampler from the executor around the job (dlrun.execute.telemetry); a batch job's
script starts it on every node in the background (Slurm: an overlapping `srun` step of one task per node;
PBS: `pbsdsh -u`; LSF: `jsrun` one resource set per host; one node: the script's own host) and, from an
EXIT trap, writes the stop file the samplers watch, waits for them (bounded) and ends what is left. The trap
runs however the script ends; when the scheduler kills the job outright, the samplers get its SIGTERM and
flush like on any other stop.
"""
from __future__ import annotations

from pathlib import Path

from dlrun.job import RUN_DIR_VAR
from dlrun.probe import telemetry_gpu, telemetry_sampler
from dlrun.shell import Expand
from dlrun.telemetry.series import DIR

#: The sampler's files, as shipped into the run directory (the entry first; it imports its sibling).
SAMPLER_FILES = ("telemetry_sampler.py", "telemetry_gpu.py")
STOP_FILE = "stop"
#: How long the end-of-job trap waits for the samplers to see the stop file (they look every 0.2 s).
STOP_WAIT_S = 15


def sampler_files() -> dict[str, str]:
    """{name in the run directory: source text} of the sampler."""
    return {name: Path(module.__file__).read_text()
            for name, module in zip(SAMPLER_FILES, (telemetry_sampler, telemetry_gpu))}


def batch_sampler_argv(period: float) -> list[str]:
    """The sampler's command on a compute node (the node's own python3, outside any container)."""
    run_dir = f"${{{RUN_DIR_VAR}}}"
    return ["python3", Expand(f"{run_dir}/{SAMPLER_FILES[0]}"), "--period", f"{period:g}",
            "--out", Expand(f"{run_dir}/{DIR}"), "--stop-file", Expand(f"{run_dir}/{DIR}/{STOP_FILE}")]


def batch_lines(start_command: str) -> list[str]:
    """Script lines that start the samplers (`start_command`, in the background) and stop them on EXIT."""
    folder = f'"${{{RUN_DIR_VAR}}}/{DIR}"'
    stop = f'"${{{RUN_DIR_VAR}}}/{DIR}/{STOP_FILE}"'
    return [
        f"mkdir -p {folder}",
        f'{start_command} 2>>"${{{RUN_DIR_VAR}}}/{DIR}/sampler.log" &',
        "dlrun_telemetry_pid=$!",
        "# shellcheck disable=SC2317  # called by the EXIT trap",
        "dlrun_stop_telemetry() {",
        f"  touch {stop}",
        f"  for _ in $(seq {STOP_WAIT_S * 5}); do",
        '    kill -0 "$dlrun_telemetry_pid" 2>/dev/null || break',
        "    sleep 0.2",
        "  done",
        '  kill "$dlrun_telemetry_pid" 2>/dev/null || true',
        '  wait "$dlrun_telemetry_pid" 2>/dev/null || true',
        "}",
        "trap dlrun_stop_telemetry EXIT",
    ]


def local_sampler_argv(python: str, run_path: Path, period: float) -> list[str]:
    """The sampler's command for a local run: this Python, the run directory's copy, stopped by dlrun (or
    by its own death)."""
    return [python, str(run_path / SAMPLER_FILES[0]), "--period", f"{period:g}",
            "--out", str(run_path / DIR), "--watch-parent"]

