"""Rendering, exactly: every runtime x launcher x fabric, and per scheduler the whole script.

Three layers of checks, as ReFrame does for its container platforms:
  * hand-written exact commands for each runtime, each launcher and the scheduler directives;
  * golden files for the full matrix and for one whole script per scheduler (tests/golden/); regenerate with
    `DLRUN_REGEN_GOLDEN=1 pytest tests/test_render_matrix.py` and review the diff;
  * invariants for every combination (the runtime's command is inside the launch, every fabric variable is
    exported and forwarded, devices reach the container) and shellcheck on every generated script.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from golden_files import GOLDEN, REGEN, assert_golden, shellcheck_path
from matrix_catalog import EXPECTED_RUNTIMES, FABRICS, LAUNCHERS, SCHEDULER_FOR, matrix_plan

from dlrun.errors import UsageError
from dlrun.launchers.horovodrun import HOROVODRUN_OWN_MCA
from dlrun.registry import LAUNCHERS as LAUNCHER_REGISTRY
from dlrun.job import RankCommand
from dlrun.plan import fabric_for
from dlrun.render import harness_command, rank_environment, render_job
from dlrun.shell import join
from dlrun.registry import RUNTIMES
from dlrun.registry import SCHEDULERS

FIXED_HOME = "/nonexistent/dlrun-home"  # the image store (SIF files) lives under DLRUN_HOME
SIF = f"{FIXED_HOME}/images/matrix-image/x86_64/matrix-image.sif"
# The options in their declaration order (dlrun.runoptions), then what no option decides.
HARNESS = ("python3 /opt/dlrun/harness_pytorch.py --model trivial --threads 8 --batch-size 8 --steps 3 "
           "--warmup-steps 1 --precision fp32 --data-workers 4 "
           "--timeout-s 1200 "  # the collective timeout is the plan's time limit, 00:20:00
           "--device cuda --expected-world-size 4")
# A dataset bound at /data (--data DIR is that bind) is what the harness trains on.
HARNESS_DATA = HARNESS.replace("--precision fp32 ", "--precision fp32 --data-dir /data ")


@pytest.fixture(autouse=True)
def fixed_home(monkeypatch):
    """Rendered text must not depend on who runs the tests."""
    monkeypatch.setenv("DLRUN_HOME", FIXED_HOME)
    monkeypatch.setenv("XDG_CONFIG_HOME", "/nonexistent/xdg-config")
    monkeypatch.delenv("DLRUN_PATH", raising=False)
    monkeypatch.setattr("dlrun.plan.jobuser.effective_uid", lambda: 1000)  # a site's user, not root


def _rank(plan, launcher="srun") -> RankCommand:
    chosen = LAUNCHER_REGISTRY.get(launcher)
    return RankCommand(argv=harness_command(plan), env=rank_environment(plan), passthrough=chosen.rank_env_names,
                       passthrough_prefixes=chosen.rank_env_prefixes)


def test_every_runtime_is_registered():
    assert EXPECTED_RUNTIMES <= set(RUNTIMES.names())
    assert set(LAUNCHERS) <= set(LAUNCHER_REGISTRY.names())
    assert {"local", "slurm", "lsf", "pbs", "kubernetes"} <= set(SCHEDULERS.names())


# ------------------------------------------------------------------------------------ exact: runtimes
def test_host_runtime_leaves_the_command_alone():
    plan = matrix_plan("host", "srun", "ib")
    rank = _rank(plan)
    assert RUNTIMES.get("host").wrap(plan, rank) == rank
    assert join(rank.argv) == HARNESS


@pytest.fixture
def imagenet(tmp_path):
    """A dataset directory for --data; rendered paths show it as /scratch/imagenet."""
    path = tmp_path / "imagenet"
    path.mkdir()
    return path


def _shown(argv, imagenet) -> str:
    return join(argv).replace(str(imagenet), "/scratch/imagenet")


@pytest.mark.parametrize("name,prefix", [("singularity", "SINGULARITYENV_"), ("apptainer", "APPTAINERENV_")])
def test_singularity_and_apptainer_exact(name, prefix, imagenet):
    plan = matrix_plan(name, "srun", "ib", data=str(imagenet), bind=["/scratch/out:/out:rw"])
    wrapped = RUNTIMES.get(name).wrap(plan, _rank(plan))
    assert _shown(wrapped.argv, imagenet) == (
        f'{name} exec --nv -B "${{DLRUN_RUN_DIR}}" --pwd "${{DLRUN_RUN_DIR}}" '
        "-B /scratch/out:/out -B /scratch/imagenet:/data:ro -B /dev/infiniband:/dev/infiniband "
        "--env DLRUN_KNOB_SOURCES=threads=default --env GLOO_SOCKET_IFNAME=ib0 "
        '--env "MASTER_ADDR=${DLRUN_MASTER_ADDR}" --env "MASTER_PORT=${DLRUN_MASTER_PORT:-29500}" '
        "--env NCCL_DEBUG=INFO --env NCCL_IB_DISABLE=0 --env NCCL_IB_HCA=mlx5_0:1 --env NCCL_SOCKET_IFNAME=ib0 "
        "--env OMP_NUM_THREADS=8 --env PYTHONUNBUFFERED=1 --env UCX_NET_DEVICES=mlx5_0:1 "
        f"{SIF} {HARNESS_DATA}")
    # Values that --env's comma-separated syntax cannot carry go through the prefixed variables.
    assert wrapped.env[f"{prefix}NCCL_DEBUG_SUBSYS"] == "INIT,NET"
    assert wrapped.env[f"{prefix}UCX_TLS"] == "rc,sm,self,cuda_copy,cuda_ipc"
    assert wrapped.passthrough == LAUNCHER_REGISTRY.get("srun").rank_env_names


def test_singularity_refuses_binds_it_cannot_express():
    plan = matrix_plan("singularity", "srun", "tcp", bind=["/data,1:/in"])
    with pytest.raises(UsageError, match=r"bind path '/data,1' contains ',' or ':'"):
        render_job(plan)


def test_enroot_through_pyxis_exact(imagenet):
    plan = matrix_plan("enroot", "srun", "ib", data=str(imagenet))
    wrapped = RUNTIMES.get("enroot").wrap(plan, _rank(plan))
    assert _shown(wrapped.argv, imagenet) == HARNESS_DATA  # pyxis starts the rank inside the container itself
    assert _shown(list(wrapped.launcher_args), imagenet) == (
        "'--container-image=registry.example.org#dlrun/matrix:x86_64' "
        '"--container-mounts=${DLRUN_RUN_DIR}:${DLRUN_RUN_DIR}",/scratch/imagenet:/data:ro,'
        "/dev/infiniband:/dev/infiniband "
        '--container-name=dlrun-matrix-image "--container-workdir=${DLRUN_RUN_DIR}" --no-container-mount-home')
    with pytest.raises(UsageError, match="runtime enroot runs through pyxis"):
        render_job(matrix_plan("enroot", "mpirun", "ib"))


# ------------------------------------------------------------------------------------ exact: launchers
AFFINITY = ("bash -c 'lr=${LOCAL_RANK:-${OMPI_COMM_WORLD_LOCAL_RANK:-${HOROVOD_LOCAL_RANK:-${SLURM_LOCALID:-"
            "${MPI_LOCALRANKID:-${JSM_NAMESPACE_LOCAL_RANK:-0}}}}}}; "
            'IFS=, read -r -a gpus <<< "${CUDA_VISIBLE_DEVICES:-}"; if [ "${#gpus[@]}" -gt 0 ]; then '
            'gpu=${gpus[lr % ${#gpus[@]}]}; else gpu=$lr; fi; export CUDA_VISIBLE_DEVICES="$gpu"; numa=(0 1); '
            'node=""; case "$gpu" in (*[!0-9]*) ;; (*) node=${numa[gpu]:-} ;; esac; if [ -n "$node" ] && '
            'command -v taskset >/dev/null && cpus=$(cat "/sys/devices/system/node/node${node}/cpulist" '
            "2>/dev/null); then exec taskset -c \"$cpus\" \"$@\"; fi; exec \"$@\"' dlrun-rank")


def _launch_line(plan) -> str:
    return render_job(plan).script.strip().splitlines()[-1]


def test_mpirun_hybrid_exact():
    line = _launch_line(matrix_plan("host", "mpirun", "tcp"))
    assert line == (
        'mpirun -np 4 -H "${DLRUN_HOSTS}" --bind-to none --map-by slot --output-filename "${DLRUN_RUN_DIR}/logs" '
        "-mca pml ob1 -mca btl '^openib' -mca btl_tcp_if_include eth0 "
        "-x DLRUN_KNOB_SOURCES -x GLOO_SOCKET_IFNAME -x MASTER_ADDR -x MASTER_PORT -x NCCL_IB_DISABLE "
        "-x NCCL_SOCKET_IFNAME "
        f"-x OMP_NUM_THREADS -x PYTHONUNBUFFERED {AFFINITY} {HARNESS}")
    ib = _launch_line(matrix_plan("host", "mpirun", "ib"))
    assert "-mca pml ucx -mca osc ucx -mca btl '^openib' -x DLRUN_KNOB_SOURCES -x GLOO_SOCKET_IFNAME" in ib
    opa = _launch_line(matrix_plan("host", "mpirun", "opa"))
    assert "-mca pml cm -mca mtl ofi -mca mtl_ofi_provider_include psm2 -mca btl '^openib'" in opa
    assert "-x FI_PROVIDER" in opa
    assert "PSM2_CUDA" not in opa  # the matrix image does not say its PSM2 has CUDA (dlrun.nodemodel.gpudirect)


def test_mpirun_under_pbs_is_mpiexec_with_hosts_from_the_nodefile():
    script = render_job(matrix_plan("host", "mpirun", "tcp", scheduler="pbs")).script
    # the node file's order, each host once: rank 0 lands on its first host, the rendezvous address
    assert "DLRUN_HOSTS=$(awk '!seen[$0]++' \"${PBS_NODEFILE}\" | sed 's/$/:2/' | paste -sd, -)" in script
    assert script.strip().splitlines()[-1].startswith('mpiexec -np 4 -H "${DLRUN_HOSTS}" --bind-to none')


def test_srun_exact():
    line = _launch_line(matrix_plan("host", "srun", "tcp"))
    assert line == (
        "srun --mpi=pmix --nodes=2 --ntasks=4 --ntasks-per-node=2 --cpus-per-task=8 --kill-on-bad-exit=1 "
        '--export=ALL "--output=${DLRUN_RUN_DIR}/logs/rank.%t/stdout" "--error=${DLRUN_RUN_DIR}/logs/rank.%t/stderr" '
        f"--cpu-bind=none {AFFINITY} {HARNESS}")


def test_jsrun_exact():
    line = _launch_line(matrix_plan("host", "jsrun", "tcp"))
    assert line == (
        "jsrun --nrs 4 --rs_per_host 2 --tasks_per_rs 1 --cpu_per_rs 8 --gpu_per_rs 1 --bind packed:8 "
        "--launch_distribution packed --smpiargs=off bash -c 'export RANK=\"$JSM_NAMESPACE_RANK\" "
        "WORLD_SIZE=\"$JSM_NAMESPACE_SIZE\" LOCAL_RANK=\"$JSM_NAMESPACE_LOCAL_RANK\"; exec \"$@\"' dlrun-jsm "
        f"{HARNESS}")


def test_torchrun_exact():
    line = _launch_line(matrix_plan("host", "torchrun", "tcp"))
    assert line == (
        "srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --cpus-per-task=16 --kill-on-bad-exit=1 --export=ALL "
        "python3 -m torch.distributed.run --nnodes 2 --nproc_per_node 2 --max_restarts 0 --rdzv_backend c10d "
        '--rdzv_endpoint "${MASTER_ADDR}:${MASTER_PORT}" --rdzv_id dlrun-trivial --no_python '
        f"{AFFINITY} {HARNESS}")
    single = _launch_line(matrix_plan("host", "torchrun", "tcp", scheduler="local", nodes=1))
    assert single.startswith("exec python3 -m torch.distributed.run --nnodes 1 --nproc_per_node 2 "
                             "--max_restarts 0 --standalone --no_python bash -c ")


def test_horovodrun_exact():
    line = _launch_line(matrix_plan("host", "horovodrun", "tcp"))
    assert line == (
        "horovodrun -np 4 -H \"${DLRUN_HOSTS}\" --mpi --mpi-args '--bind-to none --map-by slot' "
        "--output-filename \"${DLRUN_RUN_DIR}/logs\" "
        f"--network-interface eth0 {AFFINITY} "
        + HARNESS.replace("--data-workers 4", "--data-workers 4 --dist horovod"))


def test_launcher_scheduler_mismatches_are_usage_errors():
    with pytest.raises(UsageError, match="launcher srun needs scheduler slurm"):
        render_job(matrix_plan("host", "srun", "tcp", scheduler="pbs"))
    with pytest.raises(UsageError, match="launcher jsrun needs scheduler lsf"):
        render_job(matrix_plan("host", "jsrun", "tcp", scheduler="slurm"))


def test_torchrun_refuses_old_pytorch_images():
    from dlrun.catalog import load_catalog
    from dlrun.probe.host import probe_host
    from dlrun.plan import resolve_plan

    plan = resolve_plan(load_catalog(host=probe_host()), "trivial", system="dgx1v", launcher="torchrun")
    with pytest.raises(UsageError, match="torchrun needs PyTorch >= 1.10.*1.0.0a0"):
        render_job(plan)


# ------------------------------------------------------------------------------------ exact: schedulers
def test_sbatch_directives_exact():
    script = render_job(matrix_plan("singularity", "srun", "ib")).script
    directives = [line for line in script.splitlines() if line.startswith("#SBATCH")]
    assert directives == ["#SBATCH --job-name=dlrun-trivial", "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=2",
                          "#SBATCH --cpus-per-task=8", "#SBATCH --gpus-per-node=2", "#SBATCH --exclusive",
                          "#SBATCH --time=00:20:00", "#SBATCH --partition=gpu", "#SBATCH --account=proj1",
                          "#SBATCH --output=slurm-%j.out", "#SBATCH --error=slurm-%j.out"]
    assert script.splitlines()[0] == "#!/usr/bin/env bash"


def test_bsub_and_qsub_directives_exact():
    lsf = render_job(matrix_plan("singularity", "jsrun", "ib")).script
    assert [line for line in lsf.splitlines() if line.startswith("#BSUB")] == [
        "#BSUB -J dlrun-trivial", "#BSUB -nnodes 2", "#BSUB -W 0:20", "#BSUB -P proj1", "#BSUB -q gpu", "#BSUB -x",
        "#BSUB -o lsf-%J.out", "#BSUB -e lsf-%J.out"]
    pbs = render_job(matrix_plan("singularity", "mpirun", "ib", scheduler="pbs")).script
    assert [line for line in pbs.splitlines() if line.startswith("#PBS")] == [
        "#PBS -N dlrun-trivial", "#PBS -l select=2:ncpus=16:mpiprocs=2:ngpus=2", "#PBS -l place=scatter:excl",
        "#PBS -l walltime=00:20:00", "#PBS -q gpu", "#PBS -A proj1", "#PBS -j oe", "#PBS -o pbs.out"]


def test_hostile_scheduler_options_are_refused():
    for option in ({"partition": "gpu\n#SBATCH --uid=0"}, {"account": "a;$(touch x)"}, {"time": "1h"}):
        with pytest.raises(UsageError, match=r"^bad --(partition|account|time) "):
            matrix_plan("host", "srun", "tcp", **option)


# ------------------------------------------------------------------------------------ the whole matrix
def _combinations():
    for runtime in sorted(RUNTIMES.names()):
        for launcher in LAUNCHERS:
            for fabric in FABRICS:
                yield runtime, launcher, fabric


def _render_or_error(runtime, launcher, fabric) -> str:
    try:
        # The docker-api runtime starts ranks with this interpreter: a machine-specific path, not golden text.
        return render_job(matrix_plan(runtime, launcher, fabric)).script.replace(sys.executable, "PYTHON")
    except UsageError as exc:
        return f"error: {exc}\n"


def _sections(path: Path) -> dict[str, str]:
    sections: dict[str, str] = {}
    if not path.exists():
        return sections
    key = None
    for line in path.read_text().splitlines(keepends=True):
        match = re.match(r"^#### (\S+)$", line.rstrip("\n"))
        if match:
            key = match.group(1)
            sections[key] = ""
        elif key is not None:
            sections[key] += line
    return sections


def _write_sections(path: Path, sections: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"#### {key}\n{text}" for key, text in sections.items()))


def _check_invariants(runtime, launcher, fabric, script: str) -> None:
    plan = matrix_plan(runtime, launcher, fabric)
    fabric_env = fabric_for(plan).env
    for name, value in fabric_env.items():
        assert re.search(rf"^export {name}=", script, re.MULTILINE), f"{name} is not exported"
        if launcher == "mpirun":
            assert f"-x {name}" in script, f"{name} is not forwarded with -x"
    if fabric == "roce":  # the GID index is picked on the node before anything reads it
        setup = script.index("DLRUN_ROCE_GID_INDEX=\"\"")
        assert setup < script.index('export NCCL_IB_GID_INDEX="${DLRUN_ROCE_GID_INDEX}"')
    last = script.strip().splitlines()[-1]
    assert "harness_pytorch.py --model trivial" in last
    assert f"--expected-world-size {plan.world_size}" in last
    if runtime in ("singularity", "apptainer"):
        assert f"{runtime} exec --nv" in last
    # host: no container; charliecloud shares the host's /dev as it is; enroot: see the pyxis test.
    if runtime not in ("host", "enroot", "charliecloud") and fabric != "tcp":
        assert "/dev/infiniband" in last, "the fabric's devices must reach the container"
    if launcher in ("mpirun", "horovodrun"):
        for key, value in fabric_for(plan).mca.items():
            if launcher == "horovodrun" and key in HOROVODRUN_OWN_MCA:
                continue  # horovodrun gives these to mpirun itself
            assert f"{key} {value}" in last.replace("'", "")
    if plan.device == "cuda" and launcher not in ("jsrun", "none"):  # jsrun binds GPUs per resource set
        assert "CUDA_VISIBLE_DEVICES" in last, "one GPU per rank"


@pytest.mark.parametrize("runtime", sorted(RUNTIMES.names()))
def test_full_matrix_matches_golden_and_passes_shellcheck(tmp_path, runtime):
    """One golden file per runtime (tests/golden/matrix/<runtime>.txt): a change to one runtime's module
    shows up, and is regenerated, in that runtime's file only."""
    path = GOLDEN / "matrix" / f"{runtime}.txt"
    rendered = {f"{r}/{l}/{f}": _render_or_error(r, l, f) for r, l, f in _combinations() if r == runtime}
    if REGEN:
        _write_sections(path, rendered)
    golden = _sections(path)
    missing = sorted(set(rendered) - set(golden))
    assert not missing, f"no golden text for {missing[:5]}...; regenerate with DLRUN_REGEN_GOLDEN=1"
    changed = [key for key in rendered if rendered[key] != golden[key]]
    assert not changed, (f"{len(changed)} rendered scripts differ from {path} (first: {changed[0]}); review, then "
                         "regenerate with DLRUN_REGEN_GOLDEN=1")

    scripts = []
    for key, text in rendered.items():
        if text.startswith("error: "):
            continue
        _check_invariants(*key.split("/"), text)
        script = tmp_path / (key.replace("/", "-") + ".sh")
        script.write_text(text)
        scripts.append(str(script))
    # pyxis runs inside srun (srun, or torchrun started per node by srun); every other runtime takes every launcher
    # horovodrun gives OpenMPI the ob1 pml itself, so of the four fabrics only tcp renders under it
    expected = 2 * len(FABRICS) if runtime == "enroot" else (len(LAUNCHERS) - 1) * len(FABRICS) + 1
    assert len(scripts) == expected
    proc = subprocess.run([shellcheck_path(), "--severity=style", *scripts], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:]
    for script in scripts:
        assert subprocess.run(["bash", "-n", script]).returncode == 0


def test_matrix_errors_are_one_line_with_valid_choices():
    for runtime, launcher, fabric in _combinations():
        text = _render_or_error(runtime, launcher, fabric)
        if text.startswith("error: "):
            assert text.count("\n") == 1 and "valid" in text, text


# ------------------------------------------------------------------------------------ whole scripts per scheduler
SCHEDULER_CASES = {
    "local": dict(runtime="host", launcher="mpirun", fabric="tcp", scheduler="local", nodes=1),
    "slurm": dict(runtime="singularity", launcher="srun", fabric="roce", scheduler="slurm"),
    "pbs": dict(runtime="apptainer", launcher="mpirun", fabric="opa", scheduler="pbs"),
    "lsf": dict(runtime="singularity", launcher="jsrun", fabric="ib", scheduler="lsf"),
    "kubernetes": dict(runtime="host", launcher="mpirun", fabric="ib", scheduler="kubernetes"),
}


def test_every_scheduler_has_a_whole_script():
    assert sorted(SCHEDULER_CASES) == SCHEDULERS.names()


def _scheduler_script(name: str) -> str:
    case = dict(SCHEDULER_CASES[name])
    plan = matrix_plan(case.pop("runtime"), case.pop("launcher"), case.pop("fabric"), **case)
    return render_job(plan).script


@pytest.mark.parametrize("name", sorted(SCHEDULER_CASES))
def test_whole_script_per_scheduler(name, tmp_path):
    assert_golden(GOLDEN / "scripts" / f"{name}.sh", _scheduler_script(name), what=f"the {name} script")


def test_kubernetes_manifest_is_an_mpijob_with_a_shellchecked_launcher(tmp_path):
    script = _scheduler_script("kubernetes")
    manifest = json.loads(script.split("<<'DLRUN_MPIJOB_MANIFEST'\n", 1)[1].split("\nDLRUN_MPIJOB_MANIFEST\n")[0])
    assert manifest["apiVersion"] == "kubeflow.org/v2beta1" and manifest["kind"] == "MPIJob"
    spec = manifest["spec"]
    assert spec["slotsPerWorker"] == 2 and spec["mpiReplicaSpecs"]["Worker"]["replicas"] == 2
    worker = spec["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert worker["image"] == "registry.example.org/dlrun/matrix:x86_64"
    assert worker["resources"] == {"limits": {"nvidia.com/gpu": 2}}
    assert {"name": "dev0", "mountPath": "/dev/infiniband"} in worker["volumeMounts"]
    assert worker["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}
    launcher = spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    inner = launcher["command"][2]
    assert launcher["command"][:2] == ["/bin/bash", "-c"]
    assert "exec mpirun -np 4 --bind-to none" in inner and "-H" not in inner.split("exec mpirun")[1][:40]
    assert "singularity" not in inner and "docker" not in inner  # the pod is the container
    (tmp_path / "inner.sh").write_text("#!/usr/bin/env bash\n# shellcheck disable=SC2016\n" + inner)
    proc = subprocess.run([shellcheck_path(), str(tmp_path / "inner.sh")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout
    with pytest.raises(UsageError, match="kubernetes needs fabric_config.roce.gid_index"):
        render_job(matrix_plan("host", "mpirun", "roce", scheduler="kubernetes"))
    with pytest.raises(UsageError, match="needs launcher mpirun"):
        render_job(matrix_plan("host", "srun", "ib", scheduler="kubernetes"))


def test_launchers_and_schedulers_cover_the_plan_defaults():
    for launcher in LAUNCHERS:
        assert SCHEDULER_FOR[launcher] in SCHEDULERS.names()
