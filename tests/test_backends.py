"""Backends own their knowledge: no module outside runtimes/, launchers/, schedulers/ and images/engines/
names a backend (checked over the source tree, with the exceptions listed and justified below); every
container runtime says where its copy of an image is; a scheduler's own options are its own; and a runtime,
a launcher and a scheduler from a site's own package, registered through an entry point, go through the whole
pipeline (plan, dry run, checks, image digest, a real two-rank run, a failed rank) without another file
changing."""
from __future__ import annotations

import ast
import hashlib
import json
import os
import platform
import shlex
import sys
from pathlib import Path

import jsonschema
import pytest
from conftest import REPO, run_cli
from matrix_catalog import matrix_plan

from dlrun.catalog.loader import CatalogError, load_file
from dlrun.catalog.models import SystemSpec
from dlrun.catalog.schema import system_json_schema
from dlrun.images import lock
from dlrun.images.digest import tree_digest
from dlrun.paths import HARNESS_DIR
from dlrun.registry import ENGINES, LAUNCHERS, RUNTIMES, SCHEDULERS

PACKAGE = REPO / "launcher" / "dlrun"
#: Where backends live and may name each other; the in-container harness imports nothing from dlrun and
#: reads the variables each launcher sets (RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID), naming their sources.
BACKEND_DIRS = ("runtimes", "launchers", "schedulers", "images/engines", "harness")
#: The attributes and variables whose value is a backend's name.
ROLES = ("runtime", "launcher", "scheduler", "engine")
#: Backend names that are also ordinary words in dlrun's data (an image kind, a run's origin, "no value"):
#: they count only where they are compared with a backend choice.
COMMON_WORDS = {"host", "local", "none"}
#: What may still name a backend outside the backends, and why.
ALLOWED = {
    ("registry.py", "*"): "the tables of built-in backends",
    ("catalog/models.py", "mpirun"): "SystemSpec's default launcher for a system that names none",
    ("catalog/localhost.py", "mpirun"): "the detected localhost system's launcher",
    ("probe/mpi.py", "mpirun"): "the probe runs the host's `mpirun --version` (a program, whatever the launcher)",
    ("probe/fabric_devices.py", "docker"): "an interface name prefix (docker0) that is no fabric",
    ("images/steps.py", "*"): "the programs image operations run, by command name, with how to install each",
    ("images/refs.py", "*"): "URI schemes of image locations (docker://, podman://)",
    ("images/recipes.py", "*"): "hpccm's recipe formats (Dockerfile: docker, definition file: singularity)",
    ("images/debootstrap.py", "debootstrap"): "the debootstrap program, which this builder runs",
    ("images/docker_api.py", "*"): "the Docker API client the docker, podman and docker-api engines and the "
                                   "docker-api runtime share: Docker's and Podman's default sockets differ",
    ("images/docker_run.py", "podman"): "what the far end of the Docker API says it is (Podman's service "
                                        "applies its own limits)",
    ("results/parsers/common.py", "srun"): "the name of a regular-expression group: srun's rank tag in a log",
}


def _constants(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [value for element in node.elts for value in _constants(element)]
    return []


def _is_role(node: ast.AST) -> bool:
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return name.lower().endswith(ROLES)


def backend_names_in(source: str, names: set[str]) -> list[tuple[int, str]]:
    """(line, name) of each string literal that is a backend's name, and of each comparison of a backend
    choice (`plan.runtime == "host"`) with one."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and node.value in names - COMMON_WORDS:
            found.append((node.lineno, node.value))
        elif isinstance(node, ast.Compare) and any(_is_role(side) for side in [node.left, *node.comparators]):
            found += [(node.lineno, value) for side in [node.left, *node.comparators]
                      for value in _constants(side) if value in names & COMMON_WORDS]
    return found


def _all_names() -> set[str]:
    return {name for registry in (RUNTIMES, LAUNCHERS, SCHEDULERS, ENGINES) for name in registry.names()}


def test_the_scan_finds_a_backend_named_or_compared_outside_the_backends():
    names = _all_names()
    assert backend_names_in('if plan.launcher == "srun":\n    pass\n', names) == [(1, "srun")]
    assert backend_names_in('x = plan.runtime != "host"\nkind = image.kind == "host"\n', names) == [(1, "host")]
    assert sorted(backend_names_in('if scheduler not in ("local", "slurm"):\n    pass\n', names)) == [
        (1, "local"), (1, "slurm")]
    assert backend_names_in('origin = "local"\n', names) == []


def test_no_backend_is_named_outside_the_backends():
    names = _all_names()
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith(tuple(d + "/" for d in BACKEND_DIRS)) or (rel, "*") in ALLOWED:
            continue
        for line, name in backend_names_in(path.read_text(), names):
            if (rel, name) not in ALLOWED:
                found.setdefault(f"{rel}:{line}", []).append(name)
    assert found == {}


def test_every_allowed_name_is_still_there():
    """An exception that no longer applies is taken out of the list."""
    names = _all_names()
    stale = []
    for rel, name in ALLOWED:
        source = (PACKAGE / rel).read_text()
        if name != "*" and name not in {n for _, n in backend_names_in(source, names | {name})}:
            stale.append((rel, name))
    assert stale == []


@pytest.mark.parametrize("runtime", sorted(RUNTIMES.names()))
def test_every_runtime_says_where_its_copy_of_the_image_is(dlrun_home, runtime):
    """A container runtime that did not say would leave a run without the digest it ran."""
    backend = RUNTIMES.get(runtime)
    scheduler = "slurm" if runtime == "enroot" else "local"
    plan = matrix_plan(runtime, "srun" if scheduler == "slurm" else "mpirun", "tcp", scheduler=scheduler, nodes=1)
    copy = backend.image_copy(plan)
    if not backend.runs_container:
        assert copy.field is None and "runs no container" in copy.why
    else:
        assert copy.field in lock.FIELDS or (copy.field is None and copy.why), copy
        assert copy.field is None or copy.path is not None or copy.reference is not None
        assert copy.reference is None or backend.service is not None


def test_a_system_takes_only_its_schedulers_options(tmp_path):
    """qos is Slurm's: an LSF system refuses it with the line and the options LSF takes."""
    path = tmp_path / "site.yaml"
    common = ("name: site\ndescription: a site\nnodes: 2\ncpu: {cores_per_socket: 4}\nmemory_gb: 8\n")
    path.write_text(common + "scheduler: slurm\nscheduler_options:\n  qos: high\n  srun_mpi: pmi2\n")
    [system] = load_file(SystemSpec, path)
    assert (system.scheduler_options.qos, system.scheduler_options.srun_mpi) == ("high", "pmi2")
    path.write_text(common + "scheduler: lsf\nscheduler_options:\n  qos: high\n")
    with pytest.raises(CatalogError) as refused:
        load_file(SystemSpec, path)
    assert str(refused.value) == (f"{path}:8: scheduler_options: Value error, qos: Extra inputs are not permitted "
                                  "(scheduler lsf takes account, exclusive, extra, lsf_alloc_flags, nodelist, partition, "
                                  "time)")
    # `dlrun schema systems` says the same to an editor
    validator = jsonschema.Draft202012Validator(system_json_schema())
    entry = {"name": "site", "description": "a site", "nodes": 2, "cpu": {"cores_per_socket": 4}, "memory_gb": 8,
             "scheduler_options": {"qos": "high"}}
    assert list(validator.iter_errors({**entry, "scheduler": "slurm"})) == []
    for refusing in ({**entry, "scheduler": "lsf"}, entry):  # no scheduler named: local's options
        assert [e.message for e in validator.iter_errors(refusing)] == [
            "Additional properties are not allowed ('qos' was unexpected)"]


# ------------------------------------------------------------------------------------------ a site's backends
TOY_RUNTIME = '''"""The toy runtime: `env NAME=VALUE ... COMMAND` in front of each rank; its image is a tree."""
from dlrun.registry import RUNTIMES, Tool
from dlrun.runtimes.base import ContainerRuntime, ImageCopy
from dlrun.shell import Expand, SecretRef


@RUNTIMES.register("toy-env")
class ToyEnvRuntime(ContainerRuntime):
    tool = Tool("env", "coreutils")

    def image_copy(self, plan):
        return ImageCopy("rootfs", what="toy tree", path=plan.image.rootfs, how="copy the toy tree there")

    def wrap(self, plan, rank):
        words = [Expand(f"{k}={v}") if isinstance(v, Expand) else f"{k}={v}"
                 for k, v in sorted(rank.env.items()) if not isinstance(v, SecretRef)]
        return rank.with_argv(["env", "TOY_RUNTIME=toy-env", *words, *rank.argv])
'''
TOY_FORK = ('n=$1; shift; pids=(); for ((r = 0; r < n; r++)); do mkdir -p "$DLRUN_RUN_DIR/logs/rank.$r"; '
            '( if [ "$r" = "${TOY_FAIL_RANK:-}" ]; then exit 3; fi; export RANK=$r LOCAL_RANK=$r WORLD_SIZE=$n; '
            'exec "$@" ) > "$DLRUN_RUN_DIR/logs/rank.$r/stdout" 2> "$DLRUN_RUN_DIR/logs/rank.$r/stderr" & '
            'pids+=($!); done; for ((r = 0; r < n; r++)); do wait "${pids[r]}"; code=$?; '
            'if [ "$code" -ne 0 ]; then echo "toy-fork: rank $r exited with code $code"; kill "${pids[@]}" '
            '2>/dev/null; exit "$code"; fi; done')
TOY_LAUNCHER = f'''"""The toy launcher: bash starts every rank, one log file each, and says which rank failed."""
import re

from dlrun.errors import UsageError
from dlrun.job import Launch, RankFailure
from dlrun.launchers.base import Launcher
from dlrun.registry import LAUNCHERS, Tool

FORK = {TOY_FORK!r}


@LAUNCHERS.register("toy-fork")
class ToyForkLauncher(Launcher):
    tool = Tool("bash", "GNU bash")
    rank_output_in_job_log = False

    def check(self, plan, scheduler):
        super().check(plan, scheduler)
        if plan.nodes != 1:
            raise UsageError("launcher toy-fork starts ranks on one node; valid: --nodes 1")

    def rank_failure(self, text):
        match = re.search(r"^toy-fork: rank (\\d+) exited with code (\\d+)$", text, re.MULTILINE)
        return RankFailure("toy-fork", int(match[1]), None, exit_code=int(match[2])) if match else None

    def wrap(self, plan, rank, scheduler):
        return Launch(argv=["bash", "-c", FORK, "toy-fork", str(plan.world_size), *rank.argv], env=rank.env,
                      rank_log_pattern="logs/rank.{{rank}}/stdout")
'''
TOY_SCHEDULER = '''"""The toy batch scheduler: `submit` starts the job script with bash in a session of its own on this
machine; the job's exit status lands in a file, which `poll` reads."""
import os
import signal
import subprocess

from pydantic import Field

from dlrun.errors import UsageError
from dlrun.job import JobState
from dlrun.registry import SCHEDULERS, Tool
from dlrun.schedulers.base import OwnSchedulerOptions, Scheduler, SchedulerError, own_options

DETACHED = 'setsid bash -c \\'bash run.sh > "$1" 2>&1; echo $? > "$2.tmp"; mv "$2.tmp" "$2"\\' toy "$@" ' \\
           '< /dev/null > /dev/null 2>&1 & echo $!'


class ToyOptions(OwnSchedulerOptions):
    toy_priority: int = Field(default=0, ge=0, le=9)


@SCHEDULERS.register("toy-batch")
class ToyBatchScheduler(Scheduler):
    tool = Tool("bash", "GNU bash")
    batch = True
    options = ToyOptions

    def check(self, plan):
        if plan.nodes != 1:
            raise UsageError("scheduler toy-batch has one node; valid: --nodes 1")

    def render(self, plan, launch):
        directives = [f"# toy-batch: priority={own_options(ToyOptions, plan).toy_priority}"]
        return self.job(plan, launch, self.script(plan, launch, "toy batch job", directives, exec_launch=False),
                        ["bash", "run.sh"])

    def submit(self, rendered, run_path, env):
        proc = subprocess.run(["bash", "-c", DETACHED, "toy", "toy.out", "toy.exit"], cwd=run_path, env=env,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise SchedulerError(f"toy-batch could not start the job: {proc.stderr.strip()}")
        return proc.stdout.strip()

    def poll(self, job_id, run_path):
        done = run_path / "toy.exit"
        if done.exists():
            code = int(done.read_text())
            return JobState(state="completed" if code == 0 else "failed", exit_code=code, raw="EXITED")
        try:
            os.kill(int(job_id), 0)
        except ProcessLookupError:
            return JobState(state="unknown", reason="the job's process is gone")
        return JobState(state="running", raw="RUNNING")

    def cancel(self, job_id):
        try:
            os.killpg(int(job_id), signal.SIGTERM)
        except ProcessLookupError:
            pass

    def output_files(self, job_id, run_path):
        return [run_path / "toy.out"]
'''
ENTRY_POINTS = """[dlrun.runtimes]
toy-env = toy_dlrun.runtime

[dlrun.launchers]
toy-fork = toy_dlrun.launcher

[dlrun.schedulers]
toy-batch = toy_dlrun.scheduler
"""


def _site_package(root: Path) -> Path:
    """An installed distribution as pip would leave it: the package and its dist-info with entry points."""
    package = root / "toy_dlrun"
    package.mkdir(parents=True)
    for name, text in {"__init__.py": "", "runtime.py": TOY_RUNTIME, "launcher.py": TOY_LAUNCHER,
                       "scheduler.py": TOY_SCHEDULER}.items():
        (package / name).write_text(text)
    info = root / "toy_dlrun-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-dlrun\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    return root


def _catalog(root: Path, tree: Path, arch: str) -> Path:
    (root / "systems").mkdir(parents=True)
    (root / "images").mkdir()
    (root / "systems" / "toy.yaml").write_text(
        "name: toy\ndescription: this machine through the toy backends\n"
        f"arch: {arch}\nnodes: 1\ncpu: {{cores_per_socket: 2}}\nmemory_gb: 4\n"
        "scheduler: toy-batch\nlauncher: toy-fork\nruntime: toy-env\ndefault_image: toy-image\n"
        "scheduler_options: {toy_priority: 7, time: '00:10:00'}\n")
    (root / "images" / "toy.yaml").write_text(
        f"name: toy-image\ndescription: this machine's Python as the toy runtime's image\narch: [{arch}]\n"
        f"python: {json.dumps(sys.executable)}\nharness_dir: {json.dumps(str(HARNESS_DIR))}\n"
        f"rootfs: {json.dumps(str(tree))}\n")
    return root


def _source_state() -> dict[str, str]:
    return {str(path.relative_to(REPO)): hashlib.sha256(path.read_bytes()).hexdigest()
            for base in ("launcher", "recipes", "containers") for path in sorted((REPO / base).rglob("*"))
            if path.is_file() and "__pycache__" not in path.parts}


def test_a_sites_runtime_launcher_and_scheduler_run_through_the_whole_pipeline(dlrun_home, tmp_path):
    before = _source_state()
    arch = platform.machine()
    tree = tmp_path / "toy-tree"
    (tree / "etc").mkdir(parents=True)
    (tree / "etc" / "toy-release").write_text("toy 1\n")
    lock.record("toy-image", arch, rootfs=tree_digest(tree), recorded_by="test")
    site = _site_package(tmp_path / "site")
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])),
           "DLRUN_PATH": str(_catalog(tmp_path / "catalog", tree, arch))}

    dry = run_cli("run", "trivial", "--system", "toy", "--ranks-per-node", "2", "--dry-run", env=env)
    assert dry.returncode == 0, dry.stderr
    assert "# toy-batch: priority=7\n" in dry.stdout
    launch = shlex.split(dry.stdout.rstrip("\n").splitlines()[-1])
    assert launch[:7] == ["bash", "-c", TOY_FORK, "toy-fork", "2", "env", "TOY_RUNTIME=toy-env"]
    harness = launch.index(sys.executable)
    assert launch[harness + 1] == f"{HARNESS_DIR}/harness_pytorch.py"
    assert launch[launch.index("--expected-world-size") + 1] == "2"

    doctor = json.loads(run_cli("doctor", "--system", "toy", "--json", env=env).stdout)
    assert doctor["plan"] == {"system": "toy", "image": "toy-image", "scheduler": "toy-batch",
                              "launcher": "toy-fork", "runtime": "toy-env", "fabric": "tcp"}
    assert [c for c in doctor["checks"] if c["level"] == "error"] == []

    run = run_cli("run", "trivial", "--system", "toy", "--ranks-per-node", "2", "--steps", "2",
                  "--warmup-steps", "1", "--batch-size", "4", env=env)
    assert run.returncode == 0, run.stderr
    [stored] = json.loads(run_cli("results", "list", "--json", env=env).stdout)
    shown = json.loads(run_cli("results", "show", stored["id"], "--json", env=env).stdout)
    assert (shown["status"], shown["world_size"]) == ("ok", 2)
    assert {k: shown["plan"][k] for k in ("scheduler", "launcher", "runtime")} == {
        "scheduler": "toy-batch", "launcher": "toy-fork", "runtime": "toy-env"}
    assert shown["provenance"]["image_check"] == {"runtime": "toy-env", "verified": True, "field": "rootfs",
                                                  "digest": tree_digest(tree), "artifact": str(tree)}

    failed = run_cli("run", "trivial", "--system", "toy", "--env", "TOY_FAIL_RANK=0", env=env)
    assert failed.returncode == 1
    assert "rank 0 exited with code 3, as toy-fork reports; its log is empty" in failed.stderr

    (tree / "etc" / "toy-release").write_text("toy 2\n")  # the copy is no longer what the lock records
    changed = run_cli("run", "trivial", "--system", "toy", env=env)
    assert changed.returncode == 1
    assert f"digest mismatch for image toy-image ({arch}), runtime toy-env: images.lock records " in changed.stderr
    assert _source_state() == before


def test_a_sites_scheduler_refuses_an_option_it_does_not_take(dlrun_home, tmp_path):
    site = _site_package(tmp_path / "site")
    catalog = _catalog(tmp_path / "catalog", tmp_path, platform.machine())
    system = catalog / "systems" / "toy.yaml"
    system.write_text(system.read_text().replace("toy_priority", "toy_prio"))
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])),
           "DLRUN_PATH": str(catalog)}
    proc = run_cli("run", "trivial", "--system", "toy", "--dry-run", env=env)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == (f"dlrun: error: {system}:11: scheduler_options: Value error, toy_prio: Extra inputs "
                                   "are not permitted (scheduler toy-batch takes account, exclusive, extra, nodelist, "
                                   "partition, time, toy_priority)")
