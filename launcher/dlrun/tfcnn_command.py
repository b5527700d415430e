"""tf_cnn_benchmarks, the benchmark code the seeds' TensorFlow numbers come from: its command line, and how its
processes are laid out.

Three layouts, chosen by the plan's `variable_update` (dlrun.tfcnn.knobs):
  * per rank: Horovod, one process per GPU, started by the plan's launcher (mpirun, jsrun, srun); also a
    single rank;
  * per node: local training (replicated, independent, parameter_server on one node), one process with
    `--num_gpus` = the node's ranks, started by the scheduler's per-node launch;
  * cluster: native distributed TensorFlow over gRPC (parameter_server, distributed_replicated,
    collective_all_reduce). One worker per node with all its GPUs, as Han et al. ran on Summitdev ("GPU0 gathers
    gradients from other GPUs, and sends an aggregated gradient to the CPU. Then, each worker pushes the updated
    delta W to the parameter server", Sec. II). The scheduler's per-node launch starts a small wrapper on every
    node; it starts that node's share of the parameter servers in the background (no GPU), runs the worker,
    and stops its parameter servers once every worker has finished (a tf_cnn_benchmarks parameter server never
    exits by itself). Host lists come from the allocation when the job starts.
"""
from __future__ import annotations

import dataclasses
import shlex
from typing import TYPE_CHECKING

from dlrun.harness.harness_contract import rank_variables, shell_first_set
from dlrun.job import Launch, RankCommand
from dlrun.plan import Plan
from dlrun.shell import Expand
from dlrun.tfcnn.knobs import CLUSTER_MODES

if TYPE_CHECKING:
    from dlrun.schedulers.base import Scheduler

TF_CNN_BENCHMARKS_DIR = "/opt/tensorflow-benchmarks"  # where our TensorFlow images clone tensorflow/benchmarks


def tf_layout(plan: Plan) -> str:
    """per-rank | per-node | cluster (see the module docstring)."""
    mode = plan.variable_update
    if mode in CLUSTER_MODES and (mode != "parameter_server" or plan.parameter_servers):
        return "cluster"
    if mode == "horovod" or plan.world_size == 1:
        return "per-rank"
    return "per-node"


def tf_cnn_benchmarks_command(plan: Plan) -> list[str]:
    """One process's command. In a cluster, the wrapper adds --job_name and --task_index per process."""
    root = next((b.path for b in getattr(plan.image, "benchmarks", []) if b.name == "tf_cnn_benchmarks"),
                TF_CNN_BENCHMARKS_DIR)
    gpu = plan.device == "cuda"
    layout = tf_layout(plan)
    per_process = 1 if layout == "per-rank" else plan.ranks_per_node  # devices (towers) of one process
    argv = [
        plan.image.python, f"{root}/scripts/tf_cnn_benchmarks/tf_cnn_benchmarks.py",
        f"--model={plan.workload.tf_cnn_model}",
        f"--batch_size={plan.batch_size}",  # per device, as dlrun's
        f"--num_batches={plan.steps}",
        f"--num_warmup_batches={plan.warmup_steps}",
        "--display_every=10",
        f"--device={'gpu' if gpu else 'cpu'}",
        f"--data_format={plan.data_format}",  # decided once, by dlrun.tfcnn.knobs (NCHW on GPUs, NHWC on CPUs)
        f"--num_gpus={per_process if gpu else 1}",
        f"--variable_update={plan.variable_update}",
    ]
    argv += _distribution_flags(plan, gpu, layout)
    if plan.precision in ("amp", "fp16"):
        argv.append("--use_fp16=True")
    # TensorFlow sizes its intra-op pool to every CPU the process may use: ranks bound to one socket would each
    # take the whole socket, so the rank's share of the cores is given (dlrun.nodemodel.binding)
    argv.append(f"--num_intra_threads={plan.threads_per_rank * per_process}")
    if not gpu:
        argv.append("--num_inter_threads=1")
    where = plan.data_mount
    if where is not None:
        argv += ["--data_name=imagenet", f"--data_dir={where}"]
    return argv + list(plan.benchmark_args)



def _distribution_flags(plan: Plan, gpu: bool, layout: str) -> list:
    """How the replicas share their variables: all-reduce spec, Horovod's device, the parameter device, and
    the gRPC cluster's hosts (filled per process at run time)."""
    argv: list = []
    if plan.all_reduce_spec:
        argv.append(f"--all_reduce_spec={plan.all_reduce_spec}")
    if plan.variable_update == "horovod" and plan.world_size > 1 and gpu:
        argv.append("--horovod_device=gpu")
    if plan.variable_update in ("parameter_server", "distributed_replicated") and layout != "per-rank":
        # Han et al.: "GPU0 gathers gradients from other GPUs" (Sec. II); tf_cnn_benchmarks' default, written out.
        argv.append(f"--local_parameter_device={'gpu' if gpu else 'cpu'}")
    if layout == "cluster":
        argv += ["--server_protocol=grpc",  # Han et al., Sec. IV-C2: gRPC over IP over InfiniBand
                 Expand("--worker_hosts=${DLRUN_TF_WORKER_HOSTS}")]
        if plan.parameter_servers:
            argv.append(Expand("--ps_hosts=${DLRUN_TF_PS_HOSTS}"))
    return argv

# Where the fabric names its IP interface (ib0: IP over InfiniBand), each node writes that interface's IPv4
# address into the shared run directory and the host lists' entries become those addresses (entry k of
# --worker_hosts runs on node k, of --ps_hosts on node k / per): bare host names resolve to the management net.
IP_HOSTS_SCRIPT = (
    'iface=@IFACE@; '
    'addr=$(ip -4 -o addr show dev "$iface" 2>/dev/null | awk \'{ split($4, a, "/"); print a[1]; exit }\'); '
    'if [ -z "$addr" ]; then echo "dlrun: no IPv4 address on interface $iface on $(hostname)" >&2; exit 1; fi; '
    'echo "$addr" >"$dir/addr.$i.tmp"; mv "$dir/addr.$i.tmp" "$dir/addr.$i"; '
    'for ((t = 0; t < 600; t++)); do '
    '[ "$(find "$dir" -name "addr.*" ! -name "*.tmp" | wc -l)" -ge "$workers" ] && break; sleep 1; done; '
    'addrs=(); for ((k = 0; k < workers; k++)); do addrs+=("$(cat "$dir/addr.$k" 2>/dev/null || true)"); '
    'if [ -z "${addrs[k]}" ]; then echo "dlrun: node $k wrote no $iface address in 600 s" >&2; exit 1; fi; done; '
    'args=(); for a in "$@"; do case "$a" in '
    '--worker_hosts=* | --ps_hosts=*) p=1; [ "${a%%=*}" = --ps_hosts ] && p=$per; '
    'n=0; list=""; IFS=, read -r -a entries <<< "${a#*=}"; '
    'for e in "${entries[@]}"; do list+="${list:+,}${addrs[n / p]}:${e##*:}"; n=$((n + 1)); done; '
    'args+=("${a%%=*}=$list") ;; '
    '*) args+=("$a") ;; esac; done; set -- "${args[@]}"; '
)
# Runs on each node in front of the (runtime-wrapped) tf_cnn_benchmarks command; constant text, only the
# counts (integers of the plan) are filled in. The process's index in the per-node step is its worker index.
CLUSTER_SCRIPT = (
    f"i={shell_first_set(rank_variables())}; "
    "servers=@PS@; per=@PER@; workers=@WORKERS@; "
    'dir="${DLRUN_RUN_DIR}/logs/tf-cluster"; mkdir -p "$dir"; pids=(); '
    "for ((j = i * per; j < (i + 1) * per && j < servers; j++)); do "
    'CUDA_VISIBLE_DEVICES= "$@" --job_name=ps --task_index="$j" >"$dir/ps.$j.log" 2>&1 & pids+=("$!"); done; '
    'rc=0; "$@" --job_name=worker --task_index="$i" || rc=$?; '
    'echo "$rc" >"$dir/worker.$i.exit"; '
    'if [ "${#pids[@]}" -gt 0 ]; then '
    "for ((t = 0; t < 600; t++)); do "
    '[ "$(find "$dir" -name "worker.*.exit" | wc -l)" -ge "$workers" ] && break; sleep 1; done; '
    'kill "${pids[@]}" 2>/dev/null; wait; fi; '
    'exit "$rc"'
)
CLUSTER_ARG0 = "dlrun-tf-cluster"
SERVERS_LOOP = "for ((j = i * per;"


def servers_per_node(plan: Plan) -> int:
    return -(-plan.parameter_servers // plan.nodes)


def cluster_script(servers: int, per: int, workers: int, iface: str | None) -> str:
    """The per-node wrapper for these counts; with `iface`, the host lists become that interface's addresses
    (set before the parameter servers start)."""
    script = (CLUSTER_SCRIPT.replace("@PS@", str(int(servers))).replace("@PER@", str(int(per)))
              .replace("@WORKERS@", str(int(workers))))
    if not iface:
        return script
    return script.replace(SERVERS_LOOP, IP_HOSTS_SCRIPT.replace("@IFACE@", shlex.quote(iface)) + SERVERS_LOOP, 1)


def cluster_setup(plan: Plan, hosts_shell: str) -> list[str]:
    """Shell lines setting DLRUN_TF_WORKER_HOSTS (one host:port per node) and DLRUN_TF_PS_HOSTS (the parameter
    servers, `servers_per_node` on each node from the first, on the ports after the worker's)."""
    per, servers = servers_per_node(plan), plan.parameter_servers
    lines = [f"DLRUN_TF_NODES=$({hosts_shell} | head -n {int(plan.nodes)})",
             "DLRUN_TF_PORT=${DLRUN_MASTER_PORT:-" + str(int(plan.master_port)) + "}",
             "DLRUN_TF_WORKER_HOSTS=$(awk -v port=\"$DLRUN_TF_PORT\" '{ print $0 \":\" port }' "
             "<<< \"$DLRUN_TF_NODES\" | paste -sd, -)"]
    if servers:
        lines.append(f"DLRUN_TF_PS_HOSTS=$(awk -v port=\"$DLRUN_TF_PORT\" -v per={per} -v n={servers} "
                     "'{ for (l = 0; l < per && (NR - 1) * per + l < n; l++) print $0 \":\" port + 1 + l }' "
                     "<<< \"$DLRUN_TF_NODES\" | paste -sd, -)")
    return lines


def tf_node_launch(plan: Plan, rank: RankCommand, scheduler: "Scheduler") -> Launch:
    """The per-node and cluster layouts: one process per node from the scheduler, the cluster wrapper in front."""
    if tf_layout(plan) == "per-node":
        return scheduler.per_node_launch(plan, rank)
    fabric = plan.system.fabric_config.get(plan.fabric)
    script = cluster_script(plan.parameter_servers, servers_per_node(plan), plan.nodes,
                            fabric.interfaces[0] if fabric is not None and fabric.interfaces else None)
    wrapped = rank.with_argv(["bash", "-c", script, CLUSTER_ARG0, *rank.argv])
    launch = scheduler.per_node_launch(plan, wrapped)
    return dataclasses.replace(launch, setup=[*cluster_setup(plan, scheduler.compute_hosts_shell(plan, launch)),
                                              *launch.setup])
