"""The one reader of the launcher's rank variables (harness_ranks.py), shipped with the PyTorch and the
TensorFlow harness: the same answer and the same error lines for every launcher's variables, and under a
real mpirun and torchrun the ranks they started."""
from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys

import pytest

from dlrun.harness import load_harness
from dlrun.paths import HARNESS_DIR, harness_files
from harness_runs import free_port, harness_env

ranks = load_harness("pytorch", "ranks")
common = load_harness("pytorch", "common")

#: What each launcher sets in a rank's environment (rank 1 of 4, second on its node), and what the harness
#: reads from it. Variable names from each launcher's documentation: torchrun (torch.distributed.run),
#: Open MPI's mpirun (OMPI_COMM_WORLD_*, with its PMIx server's PMIX_RANK), MPICH's Hydra (PMI_RANK,
#: PMI_SIZE, MPI_LOCALRANKID), Slurm's srun (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; PMIX_RANK with
#: --mpi=pmix), IBM's jsrun (JSM_NAMESPACE_*; dlrun's wrapper hands them on as RANK/WORLD_SIZE/LOCAL_RANK)
#: and horovodrun's gloo controller (HOROVOD_*).
LAUNCHER_ENVS = {
    "torchrun": ({"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0"},
                 (1, 4, 1, "torchrun")),
    "mpirun (Open MPI)": ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4",
                          "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "PMIX_RANK": "1"},
                         (1, 4, 1, "openmpi")),
    "mpiexec (MPICH Hydra)": ({"PMI_RANK": "1", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1", "PMI_FD": "6"},
                              (1, 4, 1, "mpich")),
    "srun": ({"SLURM_PROCID": "1", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "SLURM_NODEID": "0"},
             (1, 4, 1, "slurm")),
    "srun --mpi=pmix": ({"SLURM_PROCID": "1", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "PMIX_RANK": "1"},
                        (1, 4, 1, "pmix")),
    "jsrun": ({"JSM_NAMESPACE_RANK": "1", "JSM_NAMESPACE_SIZE": "4", "JSM_NAMESPACE_LOCAL_RANK": "1"},
              (1, 4, 1, "jsrun")),
    "jsrun through dlrun's wrapper": ({"JSM_NAMESPACE_RANK": "1", "JSM_NAMESPACE_SIZE": "4",
                                       "JSM_NAMESPACE_LOCAL_RANK": "1", "RANK": "1", "WORLD_SIZE": "4",
                                       "LOCAL_RANK": "1"}, (1, 4, 1, "torchrun")),
    "horovodrun (gloo)": ({"HOROVOD_RANK": "1", "HOROVOD_SIZE": "4", "HOROVOD_LOCAL_RANK": "1"},
                          (1, 4, 1, "horovod")),
    "none": ({"HOME": "/root"}, (0, 1, 0, "single")),
}


@pytest.mark.parametrize("launcher", LAUNCHER_ENVS)
def test_each_launchers_variables(launcher):
    env, expected = LAUNCHER_ENVS[launcher]
    assert ranks.detect_rank_env(env) == expected


def test_first_source_wins_and_local_rank_may_be_unknown():
    d = ranks.detect_rank_env
    both = {"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1",
            "OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "8"}
    assert d(both) == (1, 4, 1, "torchrun")
    ompi = {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
            "PMIX_RANK": "3", "SLURM_PROCID": "0", "SLURM_NTASKS": "1"}
    assert d(ompi) == (3, 8, 1, "openmpi")
    assert d({"PMIX_RANK": "2", "SLURM_NTASKS": "4", "SLURM_LOCALID": "0", "SLURM_PROCID": "2"}) == (2, 4, 0, "pmix")
    assert d({"SLURM_PROCID": "0", "SLURM_NTASKS": "2"}) == (0, 2, None, "slurm")
    assert d({"RANK": "0"}) == (0, 1, 0, "single")  # a rank without a size is no launcher's


@pytest.mark.parametrize("source, rank_key, size_key, _", ranks.RANK_SOURCES,
                         ids=[f"{row[0]}-{row[2]}" for row in ranks.RANK_SOURCES])
def test_one_error_line_for_every_launcher(source, rank_key, size_key, _):
    with pytest.raises(common.HarnessError, match=rf"^bad {rank_key}='x' in the environment \({source}\)$"):
        ranks.detect_rank_env({rank_key: "x", size_key: "4"})
    with pytest.raises(common.HarnessError, match=rf"^bad {size_key}='' in the environment \({source}\)$"):
        ranks.detect_rank_env({rank_key: "0", size_key: ""})
    with pytest.raises(common.HarnessError, match=rf"^inconsistent rank 4 / world size 4 \({source}\)$"):
        ranks.detect_rank_env({rank_key: "4", size_key: "4"})
    with pytest.raises(common.HarnessError, match=rf"^inconsistent rank 0 / world size 0 \({source}\)$"):
        ranks.detect_rank_env({rank_key: "0", size_key: "0"})


def test_a_world_size_other_than_the_plans_stops_with_its_own_exit_code():
    ranks.check_world_size(None, 3, 0, "openmpi")  # nothing asked: nothing to check
    ranks.check_world_size(4, 4, 2, "openmpi")
    with pytest.raises(common.HarnessError) as stopped:
        ranks.check_world_size(4, 2, 1, "slurm")
    assert stopped.value.code == common.EXIT_WORLD_SIZE != common.EXIT_USAGE
    assert stopped.value.message == ("expected world size 4 but found 2 (rank 1, rank source: slurm); "
                                     "check the launcher's process count")


def test_both_harnesses_ship_and_use_the_one_reader():
    for framework in ("pytorch", "tensorflow"):
        files = harness_files(framework)
        assert HARNESS_DIR / "harness_ranks.py" in files, framework
        defining = [p.name for p in files
                    if any(isinstance(node, ast.FunctionDef) and node.name == "detect_rank_env"
                           for node in ast.walk(ast.parse(p.read_text())))]
        assert defining == ["harness_ranks.py"], (framework, defining)
        process = ast.parse((HARNESS_DIR / f"harness_{framework}_process.py").read_text())
        imported = {alias.name for node in ast.walk(process)
                    if isinstance(node, ast.ImportFrom) and node.module == "harness_ranks" for alias in node.names}
        assert imported == {"check_world_size", "detect_rank_env"}, framework


# One write per line, as the harness's own out() does: with PYTHONUNBUFFERED set, print() writes the text and
# the newline separately, and two ranks sharing mpirun's or torchrun's stdout interleave them
# ('[0, 2, 0, "openmpi"][1, 2, 1, "openmpi"]\n\n', seen under load).
_PRINT_RANKS = "import json, sys; sys.path.insert(0, sys.argv[1]); import harness_ranks; " \
               "sys.stdout.write(json.dumps(harness_ranks.detect_rank_env()) + '\\n')"


def _started_ranks(proc: subprocess.CompletedProcess) -> list[list]:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return sorted(json.loads(line) for line in proc.stdout.splitlines() if line.startswith("["))


@pytest.mark.mpi
def test_ranks_started_by_a_real_mpirun():
    mpirun = shutil.which("mpirun")
    assert mpirun, "mpirun not found on PATH"
    proc = subprocess.run([mpirun, "-np", "2", "--oversubscribe", "--allow-run-as-root", "--bind-to", "none",
                           sys.executable, "-c", _PRINT_RANKS, str(HARNESS_DIR)],
                          capture_output=True, text=True, timeout=120, env=harness_env())
    assert _started_ranks(proc) == [[0, 2, 0, "openmpi"], [1, 2, 1, "openmpi"]]


def test_ranks_started_by_a_real_torchrun(tmp_path):
    script = tmp_path / "print_ranks.py"
    script.write_text(_PRINT_RANKS.replace("sys.argv[1]", repr(str(HARNESS_DIR))) + "\n")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                           "--master-addr", "127.0.0.1", "--master-port", str(free_port()), str(script)],
                          capture_output=True, text=True, timeout=300, env=harness_env())
    assert _started_ranks(proc) == [[0, 2, 0, "torchrun"], [1, 2, 1, "torchrun"]]
