"""Hostile strings (spaces, quotes, `;`, `$(...)`, backquotes, newlines) in data paths, bind targets, image
interpreter paths, env values and extra launcher args: either a validation error, or a script that passes
them on intact. Proven by executing every rendered script with recording stand-ins for the launchers,
runtimes and scheduler tools: the stand-ins run the per-rank wrappers and, for the host runtime, the
interpreter itself, so the whole chain is exercised; no injected command may run, and every hostile value
must arrive byte for byte."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import sysfs_trees as trees
from conftest import UNLIMITED_MEMLOCK_ENV
from hypothesis import given, settings
from hypothesis import strategies as st
from golden_files import shellcheck_path
from matrix_catalog import MATRIX_IMAGE, SCHEDULER_FOR, matrix_catalog, matrix_plan

from dlrun.catalog.loader import Catalog
from dlrun.errors import UsageError
from dlrun.plan import resolve_plan
from dlrun.render import render_job
from dlrun.registry import LAUNCHERS, RUNTIMES, SCHEDULERS

LAUNCHER_TOOLS = ("mpirun", "mpiexec", "srun", "jsrun", "horovodrun")
RUNTIME_TOOLS = ("singularity", "apptainer", "docker", "podman", "ch-run", "enroot")

RECORDER = """#!{python}
import json, os, sys, time
tool = os.path.basename(sys.argv[0])
record = {{"tool": tool, "path": sys.argv[0], "argv": sys.argv[1:],
          "env": {{k: v for k, v in os.environ.items()
                  if k.startswith(("HOSTILE", "SINGULARITYENV_", "APPTAINERENV_", "NCCL_", "MASTER_"))}}}}
if tool == "kubectl" and "create" in sys.argv:
    record["stdin"] = sys.stdin.read()
with open(os.path.join(os.environ["DLRUN_TEST_RECORD"], "%d-%s.json" % (time.time_ns(), tool)), "w") as f:
    json.dump(record, f)
args = sys.argv[1:]
if tool == "kubectl":
    if "create" in args:
        print("mpijob.kubeflow.org/dlrun-trivial-abcde")
    elif "get" in args:
        print("Succeeded")
elif tool == "scontrol":
    print("n1"); print("n2")
elif tool == "taskset":
    os.execvp(args[2], args[2:])
elif tool == "python3" and args[:2] == ["-m", "torch.distributed.run"] and "--no_python" in args:
    rest = args[args.index("--no_python") + 1:]  # as torchrun starts each worker
    os.execvp(rest[0], rest)
elif tool in {launchers!r}:
    # Run what each rank would run: from the first `bash -c` (the per-rank wrapper) on.
    for i in range(len(args) - 1):
        if args[i] == "bash" and args[i + 1] == "-c":
            os.execvp("bash", args[i:])
"""


def _hostile(mark: Path) -> str:
    return f"a b'c\"d;e $(touch {mark}) `touch {mark}` ${{HOME}} \\ \nline two; rm -rf /nonexistent"


@pytest.fixture
def hostile(tmp_path, monkeypatch):
    monkeypatch.setenv("DLRUN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("DLRUN_PATH", raising=False)
    mark = tmp_path / "pwned"
    fakebin = tmp_path / "fakebin"
    fakebin.mkdir()
    recorder = fakebin / "recorder"
    recorder.write_text(RECORDER.format(python=sys.executable, launchers=LAUNCHER_TOOLS))
    recorder.chmod(0o755)
    for tool in (*LAUNCHER_TOOLS, *RUNTIME_TOOLS, "kubectl", "scontrol", "taskset"):
        (fakebin / tool).symlink_to(recorder)
    # A data directory, a bind target, and an interpreter path full of shell syntax.
    # (A path component cannot hold '/': these markers are relative, and looked for under the whole tree.)
    data = tmp_path / "data dir 'q' \"dq\" ;x $(touch pwned-data) `touch pwned-data2`\nnewline"
    data.mkdir()
    pydir = tmp_path / "py thon;$(touch pwned-py)'q"
    pydir.mkdir()
    (pydir / "python3").symlink_to(recorder)
    image = MATRIX_IMAGE.model_copy(update={
        "name": "hostile-image", "python": str(pydir / "python3"),
        "harness_dir": f"/opt/dl run;$(touch {mark})",
        "uri": f"registry.example.org/dlrun/matrix;$(touch {mark})"})
    base = matrix_catalog()
    catalog = Catalog(images={**base.images, image.name: image}, workloads=base.workloads, systems=base.systems)
    return {"tmp": tmp_path, "mark": mark, "fakebin": fakebin, "data": data, "catalog": catalog,
            "value": _hostile(mark), "target": f"/tgt dir;$(touch {mark})'x", "launcher_arg": f"--x=$(touch {mark});'"}


def _plan(h, runtime, launcher, scheduler, fabric="tcp", nodes=2, ranks=2):
    return resolve_plan(h["catalog"], "trivial", system="matrix", image="hostile-image", runtime=runtime,
                        launcher=launcher, scheduler=scheduler, fabric=fabric, nodes=nodes, ranks_per_node=ranks,
                        steps=3, warmup_steps=1, batch_size=8, data=str(h["data"]),
                        bind=[f"{h['data']}:{h['target']}:rw"], env=[f"HOSTILE_ENV={h['value']}"],
                        launcher_arg=[] if launcher == "none" else [h["launcher_arg"]])


def _execute(h, text: str, name: str, extra_env: dict[str, str] | None = None) -> list[dict]:
    run_dir = h["tmp"] / f"run {name}"
    run_dir.mkdir()
    record = h["tmp"] / f"record-{name}"
    record.mkdir()
    script = run_dir / "run.sh"
    script.write_text(text)
    nodefile = h["tmp"] / "nodefile"
    nodefile.write_text("n1\nn1\nn2\nn2\n")
    env = {"PATH": f"{h['fakebin']}:/usr/bin:/bin", "HOME": str(h["tmp"]), "DLRUN_TEST_RECORD": str(record),
           "DLRUN_RUN_DIR": str(run_dir), "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_SUBMIT_DIR": str(run_dir),
           "PBS_NODEFILE": str(nodefile), "PBS_O_WORKDIR": str(run_dir), "LSB_DJOB_HOSTFILE": str(nodefile),
           "LS_SUBCWD": str(run_dir), **UNLIMITED_MEMLOCK_ENV, **(extra_env or {})}
    proc = subprocess.run(["bash", str(script)], cwd=run_dir, env=env, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"{name}: {proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    assert not list(h["tmp"].rglob("pwned*")), f"{name}: an injected command ran"
    return [json.loads(p.read_text()) for p in sorted(record.glob("*.json"))]


def _words(records: list[dict]) -> list[str]:
    return [word for rec in records for word in rec["argv"]] + [v for rec in records for v in rec["env"].values()]


# Not executed here, with the reason (they are still rendered and quoted like the others).
NOT_EXECUTED = {"docker-api": "starts each rank through the Docker API, which needs a daemon; its argv is "
                              "checked exactly in test_images_commands.py"}


def _combos() -> list[tuple[str, str, str]]:
    """From the registries: every launcher under every scheduler that takes it (host runtime), and every
    runtime with every launcher that renders it (under Slurm, or the launcher's own scheduler)."""
    combos = set()
    for launcher in LAUNCHERS.names():
        for scheduler in SCHEDULERS.names():
            backend = SCHEDULERS.get(scheduler)
            if not backend.runs_image and LAUNCHERS.get(launcher).supports(backend):
                combos.add(("host", launcher, scheduler))
    for runtime in sorted(set(RUNTIMES.names()) - set(NOT_EXECUTED) - {"host"}):
        for launcher in LAUNCHERS.names():
            scheduler = SCHEDULER_FOR[launcher]
            try:
                render_job(matrix_plan(runtime, launcher, "tcp", scheduler=scheduler))
            except UsageError:
                continue  # not a combination this runtime takes (enroot runs inside srun)
            combos.add((runtime, launcher, scheduler))
    return sorted(combos)


COMBOS = _combos()


# Combinations that must answer with a validation error instead (none today: every runtime quotes safely).
REFUSED: set[tuple[str, str, str]] = set()


@pytest.mark.parametrize("runtime,launcher,scheduler", COMBOS, ids=["-".join(c) for c in COMBOS])
def test_hostile_values_arrive_intact_and_nothing_is_injected(hostile, runtime, launcher, scheduler):
    h = hostile
    nodes, ranks = (1, 1) if launcher == "none" else ((1, 2) if scheduler == "local" else (2, 2))
    try:
        plan = _plan(h, runtime, launcher, scheduler, nodes=nodes, ranks=ranks)
        if runtime == "charliecloud":
            plan = plan.model_copy(update={"image": plan.image.model_copy(update={"rootfs": str(h["tmp"] / "rootfs")})})
        text = render_job(plan).script
    except UsageError as exc:  # a validation error naming the value is the other acceptable outcome
        assert "valid" in str(exc)
        assert (runtime, launcher, scheduler) in REFUSED, f"unexpected refusal: {exc}"
        return
    assert (runtime, launcher, scheduler) not in REFUSED
    script = h["tmp"] / f"{runtime}-{launcher}-{scheduler}.sh"
    script.write_text(text)
    check = subprocess.run([shellcheck_path(), "--severity=style", str(script)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout
    records = _execute(h, text, f"{runtime}-{launcher}-{scheduler}")
    tools = {rec["tool"] for rec in records}
    words = _words(records)
    assert any(h["value"] in word for word in words), f"the env value was mangled; tools seen: {tools}"
    if launcher != "none":
        assert h["launcher_arg"] in words, "the extra launcher argument was mangled"
    if runtime != "host":
        assert any(str(h["data"]) in word for word in words), "the data path was mangled"
        assert any(h["target"] in word for word in words), "the bind target was mangled"
    if runtime == "host":
        # The whole chain ran: the interpreter at the hostile path got the harness arguments intact.
        [python] = [rec for rec in records if rec["tool"] == "python3" and rec["argv"][0] != "-m"] or [None]
        assert python is not None, f"the rank command never ran; tools seen: {tools}"
        assert python["env"]["HOSTILE_ENV"] == h["value"]
        assert python["argv"][0] == f"/opt/dl run;$(touch {h['mark']})/harness_pytorch.py"
        assert python["argv"][1:3] == ["--model", "trivial"]


def test_hostile_kubernetes_manifest_and_launcher_script(hostile):
    h = hostile
    text = render_job(_plan(h, "host", "mpirun", "kubernetes")).script
    records = _execute(h, text, "kubernetes")
    [create] = [rec for rec in records if rec["tool"] == "kubectl" and "create" in rec["argv"]]
    manifest = json.loads(create["stdin"])
    worker = manifest["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    assert {"name": "bind1", "hostPath": {"path": str(h["data"])}} in worker["volumes"]
    assert worker["containers"][0]["image"] == f"registry.example.org/dlrun/matrix;$(touch {h['mark']}):x86_64"
    inner = manifest["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"][2]
    hostfile = h["tmp"] / "mpi-hostfile"  # what the MPI operator mounts at /etc/mpi/hostfile
    hostfile.write_text("dlrun-trivial-abcde-worker-0.dlrun-trivial-abcde-worker slots=2\n")
    inner_records = _execute(h, inner.replace("/etc/mpi/hostfile", str(hostfile)), "kubernetes-launcher")
    [python] = [rec for rec in inner_records if rec["tool"] == "python3"]
    assert python["env"]["HOSTILE_ENV"] == h["value"]


def test_roce_gid_reaches_the_ranks_from_the_nodes_gid_table(hostile):
    """The job script picks the GID index from the node's own table at job start (here a fake sysfs)."""
    h = hostile
    root = trees.roce(h["tmp"] / "sysfs")
    ib = root / "sys" / "class" / "infiniband"
    (ib / "mlx5_0").rename(ib / "mlx5_1")  # the matrix system names its RoCE HCA mlx5_1
    text = render_job(_plan(h, "host", "srun", "slurm", fabric="roce")).script
    records = _execute(h, text, "roce", {"DLRUN_SYSFS_ROOT": str(root)})
    [python] = [rec for rec in records if rec["tool"] == "python3"][:1]
    assert python["env"]["NCCL_IB_GID_INDEX"] == "5"


@pytest.mark.parametrize("option,value,message", [
    ("partition", "debug\n#SBATCH --uid=0", "bad --partition"),
    ("account", "proj;$(touch x)", "bad --account"),
    ("time", "00:10:00; reboot", "bad --time"),
    ("time", "00:00:99", "bad --time '00:00:99': 99 seconds is not below 60"),
    ("time", "99999999999999999999", "more than a year"),
])
def test_hostile_directive_values_are_validation_errors(hostile, option, value, message):
    with pytest.raises(UsageError, match=message):
        resolve_plan(hostile["catalog"], "trivial", system="matrix", **{option: value})


def test_hostile_env_names_and_binds_are_validation_errors(hostile):
    with pytest.raises(UsageError, match="bad --env"):
        resolve_plan(hostile["catalog"], "trivial", system="matrix", env=["X;$(id)=1"])
    with pytest.raises(UsageError, match="bind path .* contains ',' or ':'"):
        render_job(resolve_plan(hostile["catalog"], "trivial", system="matrix", runtime="singularity",
                                bind=["/a,b:/in"]))


def test_every_runtime_is_covered():
    assert {runtime for runtime, _, _ in COMBOS} >= set(RUNTIMES.names()) - {"docker-api"}


TIME_TEXT = st.one_of(
    st.from_regex(r"\A(\d{1,3}-)?\d{1,22}(:\d{2}){0,2}\Z"),
    st.text(st.sampled_from("0123456789:- ;x\n"), max_size=14))


@settings(max_examples=400, derandomize=True, deadline=None, database=None, print_blob=False)
@given(value=TIME_TEXT)
def test_fuzz_time_limits_are_refused_or_never_shorter(value):
    """Any --time text: refused in one line naming it, or a limit of at most a year that every batch
    scheduler gets rounded up to whole minutes, never down."""
    catalog = matrix_catalog()
    try:
        plan = resolve_plan(catalog, "trivial", system="matrix", time=value)
    except UsageError as exc:
        assert str(exc).startswith(f"bad --time {value!r}") and "\n" not in str(exc)
        return
    seconds = plan.scheduler_options.time_seconds()
    minutes = plan.scheduler_options.time_minutes()
    assert 1 <= seconds <= 365 * 86400 and minutes * 60 >= seconds > (minutes - 1) * 60
    hours, mins, secs = (int(part) for part in plan.scheduler_options.hhmmss().split(":"))
    assert (hours * 60 + mins, secs) == (minutes, 0)
