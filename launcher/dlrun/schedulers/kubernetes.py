"""`kubernetes`: a Kubeflow MPIJob (mpi-operator v2beta1). The pods are the containers: the launcher pod runs
the same shell text dlrun renders everywhere (`bash -c`), mpirun reaches the worker pods through the
operator's hostfile. The run script creates the MPIJob, waits for its outcome, prints the launcher's log,
and deletes the job when interrupted."""
from __future__ import annotations

import json
from typing import Any

from pydantic import Field

from dlrun.errors import UsageError
from dlrun.job import RUN_DIR_VAR, Launch, RenderedJob
from dlrun.plan import Plan
from dlrun.registry import SCHEDULERS, Tool
from dlrun.runtimes.base import image_reference
from dlrun.schedulers.base import OwnSchedulerOptions, Scheduler, own_options, script_header
from dlrun.shell import export_lines, join, quote

POD_RUN_DIR = "/tmp/dlrun-run"
HOSTFILE = "/etc/mpi/hostfile"
MANIFEST_EOF = "DLRUN_MPIJOB_MANIFEST"


def launcher_shell(plan: Plan, launch: Launch) -> str:
    lines = ["set -euo pipefail", f'mkdir -p "${{{RUN_DIR_VAR}}}/logs"']
    if plan.nodes > 1:
        lines += [f"DLRUN_MASTER_ADDR=$(head -n 1 {HOSTFILE} | cut -d ' ' -f 1)", "export DLRUN_MASTER_ADDR"]
    lines += [*launch.setup, *export_lines(launch.env), "exec " + join(launch.argv)]
    return "\n".join(lines) + "\n"


class KubernetesOptions(OwnSchedulerOptions):
    """The Kubernetes scheduler's own settings in a system's `scheduler_options`."""

    namespace: str | None = Field(default=None, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
                                  description="The Kubernetes namespace the job is created in (its metadata).")


def mpijob_manifest(plan: Plan, launch: Launch) -> dict[str, Any]:
    opts = own_options(KubernetesOptions, plan)
    image = image_reference(plan)
    env = [{"name": RUN_DIR_VAR, "value": POD_RUN_DIR}]
    mounts = [{"name": "dshm", "mountPath": "/dev/shm"}]
    volumes: list[dict[str, Any]] = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    for index, bind in enumerate(plan.mounts):
        mounts.append({"name": f"bind{index}", "mountPath": bind.target, "readOnly": bind.read_only})
        volumes.append({"name": f"bind{index}", "hostPath": {"path": bind.source}})
    for index, device in enumerate(plan.devices):
        mounts.append({"name": f"dev{index}", "mountPath": device})
        volumes.append({"name": f"dev{index}", "hostPath": {"path": device}})
    worker: dict[str, Any] = {"name": "worker", "image": image, "env": env, "volumeMounts": mounts,
                              "command": ["/bin/bash", "-c", "sleep infinity"]}
    if plan.devices:
        worker["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
    if plan.device == "cuda":
        worker["resources"] = {"limits": {"nvidia.com/gpu": plan.system.gpus_per_node}}
    launcher = {"name": "launcher", "image": image, "env": env,
                "command": ["/bin/bash", "-c", launcher_shell(plan, launch)]}
    run_policy: dict[str, Any] = {"cleanPodPolicy": "Running", "backoffLimit": 0}
    if opts.time_minutes():
        run_policy["activeDeadlineSeconds"] = opts.time_minutes() * 60  # type: ignore[operator]
    metadata: dict[str, Any] = {"generateName": f"{plan.job_name.lower().replace('_', '-').replace('.', '-')}-",
                                "labels": {"app.kubernetes.io/managed-by": "dlrun"}}
    if opts.namespace:
        metadata["namespace"] = opts.namespace
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": metadata,
        "spec": {
            "slotsPerWorker": plan.ranks_per_node,
            "mpiImplementation": "OpenMPI",
            "runPolicy": run_policy,
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "restartPolicy": "Never",
                             "template": {"spec": {"containers": [launcher]}}},
                "Worker": {"replicas": plan.nodes, "restartPolicy": "Never",
                           "template": {"spec": {"containers": [worker], "volumes": volumes}}},
            },
        },
    }


@SCHEDULERS.register("kubernetes")
class KubernetesScheduler(Scheduler):
    tool = Tool("kubectl", "kubectl with a kubeconfig for a cluster running the Kubeflow MPI operator")
    runs_image = True
    writes_hostfile = True
    options = KubernetesOptions

    def check(self, plan: Plan) -> None:
        if plan.launcher != "mpirun":
            raise UsageError(f"scheduler kubernetes runs a Kubeflow MPIJob, which needs launcher mpirun, not "
                             f"{plan.launcher}; valid: --launcher mpirun")
        if plan.image.kind == "host":
            raise UsageError("scheduler kubernetes runs container images as pods, but image 'host' is this "
                             "machine's Python; valid: a container image (dlrun images list)")
        roce = plan.system.fabric_config.get("roce")
        if plan.fabric == "roce" and not (roce and isinstance(roce.gid_index, int)):
            raise UsageError("fabric roce on kubernetes needs fabric_config.roce.gid_index in the system profile "
                             "(pods cannot pick it before launch); valid: an integer GID index")

    def node_list_shell(self) -> str:
        return f"cut -d ' ' -f 1 {HOSTFILE}"

    def render(self, plan: Plan, launch: Launch) -> RenderedJob:
        manifest = json.dumps(mpijob_manifest(plan, launch), indent=2, sort_keys=True)
        opts = own_options(KubernetesOptions, plan)
        namespace = ["-n", opts.namespace] if opts.namespace else []
        kubectl = join(["kubectl", *namespace])
        lines = script_header(plan, "Kubernetes MPIJob (Kubeflow mpi-operator v2beta1)") + [
            "set -euo pipefail",
            f': "${{{RUN_DIR_VAR}:=$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)}}"',
            f"export {RUN_DIR_VAR}",
            f"manifest=$(cat <<'{MANIFEST_EOF}'",
            manifest,
            MANIFEST_EOF,
            ")",
            f'printf \'%s\\n\' "$manifest" > "${{{RUN_DIR_VAR}}}/mpijob.json"',
            f'job=$(printf \'%s\\n\' "$manifest" | {kubectl} create -f - -o name)',
            'echo "dlrun: created ${job}"',
            f"trap '{kubectl} delete \"${{job}}\" --wait=false >/dev/null 2>&1 || true; exit 130' INT TERM",
            "state=''",
            'while [ "$state" != Succeeded ] && [ "$state" != Failed ]; do',
            "  sleep 5",
            f"  state=$({kubectl} get \"$job\" -o "
            + quote('jsonpath={range .status.conditions[?(@.status=="True")]}{.type}{"\\n"}{end}')
            + " | tail -n 1)",
            "done",
            f'{kubectl} logs -l "training.kubeflow.org/job-name=${{job#*/}},training.kubeflow.org/job-role=launcher" '
            "--tail=-1 || true",
            'echo "dlrun: ${job} ${state}"',
            '[ "$state" = Succeeded ]',
        ]
        return RenderedJob(script="\n".join(lines) + "\n", submit_argv=["bash", "run.sh"], scheduler=self.name,
                           rank_log_pattern="output.log")
