"""tf_cnn_benchmarks jobs as the seeds ran them: Han et al.'s parameter servers over gRPC on Summitdev (LSF/jsrun),
Samsi et al.'s all-reduce strategies on TX-GAIA (Slurm), the options that choose them, their checks (one line,
exit 2), golden scripts (regenerate with `DLRUN_REGEN_GOLDEN=1`, then review the diff), and the cluster wrapper
run for real by bash: parameter servers started without GPUs, told their task, and stopped when every worker
is done."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import UNLIMITED_MEMLOCK_ENV, run_cli
from job_gate import wait_until
from golden_files import GOLDEN as GOLDEN_ROOT, assert_golden

from dlrun.catalog.experiment_points import expand
from dlrun.errors import UsageError
from dlrun.plan import resolve_plan
from dlrun.render import render_job
from dlrun.results.key import key_from_run
from dlrun.tfcnn_command import CLUSTER_ARG0, CLUSTER_SCRIPT, tf_cnn_benchmarks_command
from dlrun.tfcnn.knobs import check_all_reduce_spec

GOLDEN = GOLDEN_ROOT / "scripts"
HOSTILE_ARG = "--optimizer=a b'c\"d;e $(touch MARK) `touch MARK` ${HOME} \\ \nline two; rm -rf /nonexistent"


def _argv(catalog, workload="resnet50_v1", **options) -> list[str]:
    return tf_cnn_benchmarks_command(resolve_plan(catalog, workload, **options))


# ------------------------------------------------------------------------------------------ what is rendered
def test_summitdev_renders_parameter_servers_not_horovod(catalog):
    plan = resolve_plan(catalog, "resnet50_v1", system="summitdev", nodes=16, ps=4)
    assert (plan.variable_update, plan.parameter_servers) == ("parameter_server", 4)
    script = render_job(plan).script
    assert "horovod" not in script and "mpirun" not in script
    launch = script.splitlines()[-1]
    assert launch.startswith("jsrun --nrs 16 --rs_per_host 1 --tasks_per_rs 1 --cpu_per_rs ALL_CPUS "
                             "--gpu_per_rs ALL_GPUS --smpiargs=off bash -c ")
    for flag in ("--num_gpus=4", "--batch_size=32", "--variable_update=parameter_server",
                 "--local_parameter_device=gpu", "--server_protocol=grpc", '"--worker_hosts=${DLRUN_TF_WORKER_HOSTS}"',
                 '"--ps_hosts=${DLRUN_TF_PS_HOSTS}"'):
        assert flag in launch
    # Without --ps, several nodes of an image without Horovod get one parameter server.
    assert resolve_plan(catalog, "resnet50_v1", system="summitdev", nodes=2).parameter_servers == 1
    # One node: tf_cnn_benchmarks' local parameter server, one process driving the node's four GPUs.
    single = _argv(catalog, system="summitdev")
    assert "--num_gpus=4" in single and "--variable_update=parameter_server" in single
    assert not [arg for arg in single if "hosts" in arg]


def test_txgaia_keeps_horovod_and_renders_each_all_reduce_strategy(catalog):
    assert "--variable_update=horovod" in _argv(catalog, "resnet50", system="txgaia", nodes=2)
    collective = _argv(catalog, "resnet50", system="txgaia", nodes=2, variable_update="collective_all_reduce",
                       all_reduce_spec="collective#2")
    assert "--all_reduce_spec=collective#2" in collective and "--num_gpus=2" in collective
    assert "--all_reduce_spec=collective" in _argv(catalog, "resnet50", system="txgaia", nodes=2,
                                                   variable_update="collective_all_reduce")
    replicated = _argv(catalog, "resnet50", system="txgaia", variable_update="replicated", all_reduce_spec="nccl")
    assert "--all_reduce_spec=nccl" in replicated and "--num_gpus=2" in replicated


def test_data_format_fp16_data_dir_and_pass_through_flags(catalog, tmp_path):
    argv = _argv(catalog, "resnet50", system="txgaia", data_format="nhwc", precision="amp", data=str(tmp_path),
                 benchmark_arg=["--optimizer=momentum", "--nodistortions"])
    assert "--data_format=NHWC" in argv and "--use_fp16=True" in argv
    assert argv[-4:] == ["--data_name=imagenet", "--data_dir=/data", "--optimizer=momentum", "--nodistortions"]
    assert not [arg for arg in _argv(catalog, "resnet50", system="txgaia") if arg.startswith("--data_dir")]


BAD = [
    (dict(system="summitdev", nodes=2, variable_update="horovod"),
     "--variable-update horovod needs Horovod, which image 'tf1.8-cuda9' does not have"),
    (dict(system="summitdev", variable_update="paramter_server"), "did you mean 'parameter_server'?"),
    (dict(system="summitdev", variable_update="collective_all_reduce"), "valid for image 'tf1.8-cuda9'"),
    (dict(system="txgaia", nodes=2, variable_update="distributed_all_reduce"), "controller process"),
    (dict(system="txgaia", ranks_per_node=1, variable_update="collective_all_reduce"), "valid: 2 or more GPUs"),
    (dict(system="txgaia", nodes=2, variable_update="replicated"), "valid: --nodes 1"),
    (dict(system="txgaia", variable_update="replicated", all_reduce_spec="xrnig"), "did you mean 'xring'?"),
    (dict(system="txgaia", variable_update="replicated", all_reduce_spec="pscpu:32q:xring"), "limit '32q'"),
    (dict(system="txgaia", nodes=2, variable_update="collective_all_reduce", all_reduce_spec="xring"),
     "valid: collective or collective#N"),
    (dict(system="txgaia", nodes=2, variable_update="parameter_server", all_reduce_spec="xring"),
     "does not read it"),
    (dict(system="txgaia", nodes=2, variable_update="horovod", ps=2), "starts no parameter servers"),
    (dict(system="summitdev", nodes=4, ps=6), "valid: 1..4 or a multiple of 4"),
    (dict(system="txgaia", benchmark_arg=["--batch_size=7"]), "valid: --batch-size"),
    (dict(system="txgaia", benchmark_arg=["optimizer=sgd"]), "valid: --FLAG or --FLAG=VALUE"),
    (dict(system="txgaia", data_format="NCWH"), "valid: NCHW, NHWC"),
    (dict(system="localhost", image="host", variable_update="replicated"), "is a tf_cnn_benchmarks option"),
    (dict(system="localhost", image="host", all_reduce_spec="xring"), "is a tf_cnn_benchmarks option"),
]


@pytest.mark.parametrize("options,message", BAD)
def test_bad_options_are_one_line_with_what_is_valid(catalog, options, message):
    workload = "resnet50" if options.get("system") != "summitdev" else "resnet50_v1"
    with pytest.raises(UsageError) as info:
        resolve_plan(catalog, workload, **options)
    text = str(info.value)
    assert message in text and "\n" not in text and "valid" in text and info.value.exit_code == 2


def test_cli_options_reach_the_plan_and_bad_ones_exit_2():
    proc = run_cli("run", "resnet50_v1", "--system", "summitdev", "--nodes", "2", "--variable-update", "horovod",
                   "--dry-run")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "not_used" not in proc.stderr
    proc = run_cli("run", "resnet50", "--system", "txgaia", "--nodes", "2", "--variable-update",
                   "collective_all_reduce", "--all-reduce-spec", "collective#2", "--benchmark-arg",
                   "--optimizer=momentum", "--data-format", "NHWC", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "'--all_reduce_spec=collective#2'" in proc.stdout and "--optimizer=momentum" in proc.stdout


def test_all_reduce_spec_grammar():
    algs = ("nccl", "xring", "pscpu", "psgpu", "nccl/xring", "collective")
    for spec in ("xring", "psgpu#4", "pscpu:32k:xring", "pscpu:2k:pscpu#2:64k:xring", "nccl/xring", "collective#2"):
        check_all_reduce_spec(spec, algs)
    for spec in ("", "xring:", "xring#x", "pscpu:32k", "ring"):
        with pytest.raises(UsageError):
            check_all_reduce_spec(spec, algs)


# ------------------------------------------------------------------------------------------ experiments, keys
def test_experiment_axes_become_plan_options(catalog):
    experiment = catalog.experiments["E002_scale_out_ps"]
    points = expand(experiment, catalog.system("summitdev"), catalog.workloads, catalog.images)
    assert {p.skip for p in points} == {None}
    assert sorted({p.plan_options()["ps"] for p in points}) == [1, 2, 4, 8, 16]
    strategies = expand(catalog.experiments["E000_allreduce_strategies"], catalog.system("txgaia"),
                        catalog.workloads, catalog.images)
    chosen = {p.values["allreduce_strategy"].paper: (p.plan_options().get("variable_update"),
                                                     p.plan_options().get("all_reduce_spec")) for p in strategies}
    assert chosen == {"COLLECTIVE2": ("collective_all_reduce", "collective#2"),
                      "second strategy (not named)": ("collective_all_reduce", "collective"),
                      "third strategy (not named)": ("horovod", None)}


def _key(plan):
    return key_from_run({"workload": plan.workload.name, "system": plan.system.name, "nodes": plan.nodes,
                         "world_size": plan.world_size, "batch_size": plan.batch_size, "precision": plan.precision,
                         "model": plan.workload.model, "plan": plan.summary()})


def test_benchmark_settings_are_part_of_the_key(catalog, tmp_path):
    one, four = (_key(resolve_plan(catalog, "resnet50_v1", system="summitdev", nodes=16, ps=n)) for n in (1, 4))
    assert one["framework"] == "tensorflow/parameter_server ps=1 layout=NCHW" and four != one
    real = _key(resolve_plan(catalog, "resnet50", system="txgaia", data=str(tmp_path),
                             benchmark_arg=["--optimizer=momentum"]))
    assert real["framework"] == "tensorflow/horovod layout=NCHW --optimizer=momentum"
    assert (real["data"], real["data_format"]) == ("real:imagenet", "tfrecord")
    pytorch = _key(resolve_plan(catalog, "resnet50", system="dgx1v", image="pytorch1.0-nvcr18.11"))
    assert pytorch["framework"] == "pytorch"


# ------------------------------------------------------------------------------------------ golden scripts
GOLDEN_CASES = {
    "tf-summitdev-ps": dict(workload="resnet50_v1", system="summitdev", nodes=16, ps=4),
    "tf-txgaia-collective2": dict(system="txgaia", nodes=4, variable_update="collective_all_reduce",
                                  all_reduce_spec="collective#2"),
    "tf-txgaia-collective": dict(system="txgaia", nodes=4, variable_update="collective_all_reduce",
                                 all_reduce_spec="collective"),
    "tf-txgaia-horovod": dict(system="txgaia", nodes=4, variable_update="horovod"),
    "tf-benchmark-arg-hostile": dict(system="txgaia", nodes=2, benchmark_arg=[HOSTILE_ARG]),
    "tf-data": dict(system="txgaia", data="{dataset}", data_format="NHWC"),
}
#: How the golden scripts show the dataset of --data (a directory the test makes).
GOLDEN_DATASET = "/datasets/imagenet-tfrecord"


@pytest.mark.parametrize("name", sorted(GOLDEN_CASES))
def test_golden_tf_scripts(catalog, name, monkeypatch, tmp_path):
    monkeypatch.setenv("DLRUN_HOME", "/nonexistent/dlrun-home")
    monkeypatch.setattr("dlrun.plan.jobuser.effective_uid", lambda: 1000)  # a site's user, not root
    case = dict(GOLDEN_CASES[name])
    dataset = tmp_path / "imagenet-tfrecord"
    dataset.mkdir()
    if case.get("data"):
        case["data"] = str(dataset)
    plan = resolve_plan(catalog, case.pop("workload", "resnet50"), **case)
    script = render_job(plan).script.replace(str(dataset), GOLDEN_DATASET)
    path = GOLDEN / f"{name}.sh"
    assert_golden(path, script, what=f"the {name} script")
    assert subprocess.run(["bash", "-n", str(path)]).returncode == 0


# ------------------------------------------------------------------------------------------ run for real
STUB = """#!{python}
import json, os, sys, time
args = sys.argv[1:]
role = next(a.split("=", 1)[1] for a in args if a.startswith("--job_name="))
task = next(a.split("=", 1)[1] for a in args if a.startswith("--task_index="))
with open(os.path.join(os.environ["STUB_RECORD"], "%s.%s.json" % (role, task)), "w") as f:
    json.dump({{"args": args, "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"), "pid": os.getpid()}}, f)
while role == "ps":
    time.sleep(3600)  # a tf_cnn_benchmarks parameter server never exits by itself
# a real worker trains only once it reaches every parameter server: wait until they have started
ps_hosts = next((a.split("=", 1)[1] for a in args if a.startswith("--ps_hosts=")), "")
while len([n for n in os.listdir(os.environ["STUB_RECORD"]) if n.startswith("ps.")]) < len(ps_hosts.split(",")) - (not ps_hosts):
    time.sleep(0.05)
# and, where the test holds it, until the test lets it finish
while os.environ.get("STUB_WORKER_GATE") and not os.path.exists(os.environ["STUB_WORKER_GATE"]):
    time.sleep(0.05)
sys.exit(int(os.environ.get("STUB_RC", "0")))
"""


def _stub_path(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "python3"
    stub.write_text(STUB.format(python=sys.executable))
    stub.chmod(0o755)
    record = tmp_path / "record"
    record.mkdir()
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "STUB_RECORD": str(record),
            "DLRUN_RUN_DIR": str(tmp_path / "run")}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


def test_local_cluster_script_runs_workers_and_parameter_servers(catalog, tmp_path):
    """The whole rendered script, run by bash: two parameter servers on this node, one worker, host lists."""
    plan = resolve_plan(catalog, "resnet50", system="txgaia", scheduler="local", runtime="host", ps=2,
                        benchmark_arg=[HOSTILE_ARG.replace("MARK", str(tmp_path / "injected"))])
    env = {**_stub_path(tmp_path), "DLRUN_MASTER_PORT": "41000", **UNLIMITED_MEMLOCK_ENV}  # Omni-Path
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "run.sh").write_text(render_job(plan).script)
    # the stub's parameter servers never exit by themselves: the script ending at all means it stopped them
    proc = subprocess.run(["bash", str(tmp_path / "run" / "run.sh")], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    host = subprocess.run(["hostname"], capture_output=True, text=True).stdout.strip()
    records = {p.stem: json.loads(p.read_text()) for p in (tmp_path / "record").iterdir()}
    assert sorted(records) == ["ps.0", "ps.1", "worker.0"]
    assert records["ps.0"]["cuda"] == records["ps.1"]["cuda"] == ""  # no GPU for a parameter server
    worker = records["worker.0"]["args"]
    assert f"--ps_hosts={host}:41001,{host}:41002" in worker and f"--worker_hosts={host}:41000" in worker
    assert worker[-3] == HOSTILE_ARG.replace("MARK", str(tmp_path / "injected"))  # byte for byte
    assert not (tmp_path / "injected").exists()
    assert not any(_alive(r["pid"]) for r in records.values())


def test_cluster_wrapper_waits_for_every_worker_and_returns_its_workers_status(tmp_path):
    """Two nodes' wrappers side by side: node 0 holds the one parameter server and stops it only after the
    slower worker on node 1 has finished; each wrapper exits with its worker's status. Node 1's worker
    finishes only when the test lets it."""
    env = _stub_path(tmp_path)
    release = tmp_path / "release-worker-1"
    script = CLUSTER_SCRIPT.replace("@PS@", "1").replace("@PER@", "1").replace("@WORKERS@", "2")
    argv = ["bash", "-c", script, CLUSTER_ARG0, "python3", "tf_cnn_benchmarks.py", "--model=trivial"]
    fast = subprocess.Popen(argv, env={**env, "SLURM_PROCID": "0"})
    slow = subprocess.Popen(argv, env={**env, "SLURM_PROCID": "1", "STUB_WORKER_GATE": str(release), "STUB_RC": "3"})
    try:
        wait_until((tmp_path / "run" / "logs" / "tf-cluster" / "worker.0.exit").exists, "node 0's worker done")
        assert fast.poll() is None  # node 0's worker is done, its parameter server still serves node 1
        ps_pid = json.loads((tmp_path / "record" / "ps.0.json").read_text())["pid"]
        assert _alive(ps_pid)
        release.touch()
        assert slow.wait(timeout=300) == 3 and fast.wait(timeout=300) == 0
    finally:
        for proc in (fast, slow):
            if proc.poll() is None:
                proc.kill()
    assert not _alive(ps_pid)
    assert sorted(p.name for p in (tmp_path / "record").iterdir()) == ["ps.0.json", "worker.0.json", "worker.1.json"]


def test_lsf_host_lists_leave_out_the_launch_node(tmp_path):
    """The golden Summitdev script's own setup lines, run by bash on an LSF host file (launch node first, one
    line per slot): workers on the 16 compute hosts, parameter servers on the first four."""
    hostfile = tmp_path / "hosts"
    hostfile.write_text("batch1\n" + "".join(f"h{n}\n" * 4 for n in range(1, 17)))
    setup = [line for line in (GOLDEN / "tf-summitdev-ps.sh").read_text().splitlines()
             if line.startswith("DLRUN_TF_")]
    program = "\n".join([*setup, 'echo "$DLRUN_TF_WORKER_HOSTS"', 'echo "$DLRUN_TF_PS_HOSTS"'])
    out = subprocess.run(["bash", "-euo", "pipefail", "-c", program], capture_output=True, text=True, check=True,
                         env={**os.environ, "LSB_DJOB_HOSTFILE": str(hostfile), "DLRUN_MASTER_PORT": "5000"})
    workers, servers = out.stdout.split()
    assert workers == ",".join(f"h{n}:5000" for n in range(1, 17))
    assert servers == "h1:5001,h2:5001,h3:5001,h4:5001"
