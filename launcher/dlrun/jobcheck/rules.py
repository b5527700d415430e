"""The rules every rendered job must satisfy, each a function of its facts (dlrun.jobcheck.facts): a refusal
names the rule, the numbers and the fix; what only the hardware can tell is an assumption the job states.

RULES is the whole list; tests hold every seed system x image x launcher x fabric to it, and a rule whose
body is removed fails them (each has a test of the job it must refuse)."""
from __future__ import annotations

from collections.abc import Callable

from dlrun.job import RuleFinding
from dlrun.jobcheck.facts import ROOT_ONLY_VARS, JobFacts
from dlrun.nodemodel import cuda as cuda_table
from dlrun.nodemodel.gpudirect import GDR_VARS, LEVEL_PATH, PSM2_GPU_VARS, farthest_path, gdr_variable
from dlrun.nodemodel.node import PATHS
from dlrun.runtimes.base import is_loopback_registry

Rule = Callable[[JobFacts], list[RuleFinding]]


def _refuse(rule: str, message: str, fix: str) -> RuleFinding:
    return RuleFinding(rule, message, fix)


def _assume(rule: str, message: str) -> RuleFinding:
    return RuleFinding(rule, message, assumption=True)


def cpu_threads(f: JobFacts) -> list[RuleFinding]:
    """ranks x threads <= the cores of the CPU set the ranks are bound to (the whole node where unbound)."""
    groups: dict[int | None, int] = {}
    for numa in f.bound:
        groups[numa] = groups.get(numa, 0) + 1
    found = []
    for numa, count in sorted(groups.items(), key=lambda item: -1 if item[0] is None else item[0]):
        if numa is not None and numa >= f.node.numa_nodes:
            found.append(_refuse("cpu-threads", f"{count} rank(s) are bound to NUMA node {numa}, which {f.system} "
                                 f"does not have ({f.node.numa_nodes} NUMA node(s))",
                                 "correct gpus.numa_affinity in the system profile"))
            continue
        ranks = f.ranks_per_node if numa is None else count
        cores = f.node.cores if numa is None else f.node.cores_of_numa(numa)
        where = (f"the {cores} cores of a {f.system} node" if numa is None else
                 f"NUMA node {numa} of {f.system} ({cores} cores, socket {f.node.socket_of_numa(numa)})")
        if ranks * f.threads > cores:
            found.append(_refuse("cpu-threads", f"{ranks} rank(s) x {f.threads} threads on {where} run "
                                 f"{ranks * f.threads} threads on {cores} cores",
                                 f"--threads {max(cores // ranks, 1)} (or fewer --ranks-per-node)"))
    if f.runs_elsewhere and not f.whole_nodes and f.bound_by == "dlrun" and None not in f.bound:
        found.append(_assume("cpu-threads", "the nodes are not asked for exclusively, yet the ranks bind to whole "
                             "NUMA nodes: the scheduler is assumed to give the job those CPUs (--exclusive makes it so)"))
    return found


def _expected_numa(f: JobFacts) -> tuple[tuple[int, ...], str] | None:
    """The NUMA node each local rank belongs on: its GPU's, else the RDMA NIC's where the GPUs' are unknown."""
    node = f.node
    if node.gpu_numa_known():
        return tuple(int(node.gpu_numa[lr % node.gpus]) for lr in range(f.ranks_per_node)), "its GPU's"  # type: ignore[arg-type]
    nics = node.nics.get(f.fabric)
    if nics is not None and nics.rdma and nics.numa and None not in nics.numa and len(set(nics.numa)) == 1:
        return (int(nics.numa[0]),) * f.ranks_per_node, f"the {f.fabric} NIC's (the GPUs' is not in the profile)"  # type: ignore[arg-type]
    return None


def gpu_socket(f: JobFacts) -> list[RuleFinding]:
    """Every GPU rank bound to its GPU's NUMA node where the node model has it (its NIC's where it has not)."""
    if f.device != "cuda" or not f.node.gpus or f.one_process_all_gpus:
        return []
    expected = _expected_numa(f)
    if expected is None:
        nics = " and its RDMA NICs" if f.rdma else ""
        return [_assume("gpu-socket", f"the NUMA node of {f.system}'s GPUs{nics} is not in the profile: the ranks "
                        "are not bound (`nvidia-smi topo -m` on a node shows it)")]
    wanted, whose = expected
    wrong = [(lr, bound, want) for lr, (bound, want) in enumerate(zip(f.bound, wanted)) if bound != want]
    if not wrong:
        return []
    lr, bound, want = wrong[0]
    now = "is not bound" if bound is None else f"is bound to NUMA node {bound}"
    return [_refuse("gpu-socket", f"local rank {lr} {now}, but {whose} NUMA node on {f.system} is {want} "
                    f"({len(wrong)} of {f.ranks_per_node} rank(s) off their socket)",
                    "bind each rank with dlrun's affinity wrapper (launchers mpirun, srun, torchrun, horovodrun) "
                    "or the launcher's resource sets (jsrun)")]


def _gdr_level(f: JobFacts) -> tuple[str, int] | None:
    for name in GDR_VARS:
        value = str(f.env.get(name, ""))
        if value.isdigit():
            return name, int(value)
        if value.upper() in PATHS:
            return name, {p: i for i, p in LEVEL_PATH.items()}[value.upper()]
    return None


def _psm2(f: JobFacts) -> list[RuleFinding]:
    psm2 = [n for n in PSM2_GPU_VARS if f.env.get(n) == "1"]
    if not psm2 or (f.fabric == "opa" and f.image.psm2_cuda is True):
        return []
    what = (f"{', '.join(psm2)}=1 on fabric opa, but image {f.image.name} does not have a PSM2 built with CUDA"
            if f.fabric == "opa" else f"{', '.join(psm2)} on fabric {f.fabric}, which has no PSM2")
    return [_refuse("gpudirect", what, "leave them out, or an image whose PSM2 has CUDA (mpi.psm2_cuda)")]


def _level_against_path(f: JobFacts, name: str, value: int, path: str) -> list[RuleFinding]:
    nics = f.node.nics.get(f.fabric)
    said = nics.gpudirect if nics is not None else None
    if value and said is False:
        return [_refuse("gpudirect", f"{name}={value} asks for GPUDirect RDMA on {f.fabric}, which the profile of "
                        f"{f.system} says does not work there", f"{name}=0")]
    if said and PATHS.index(LEVEL_PATH[value]) < PATHS.index(path):
        return [_refuse("gpudirect", f"the profile says GPUDirect RDMA runs on {f.system}'s {f.fabric}, whose "
                        f"GPU<->NIC path is {path}, but {name}={value} ({LEVEL_PATH[value]}) keeps it off there",
                        f"{name}={3 if path != 'SYS' else 5}")]
    if path == "SYS" and value >= 4 and not said:
        return [_refuse("gpudirect", f"{name}={value} forces GPUDirect RDMA across {f.system}'s socket interconnect "
                        f"on {f.fabric}, which the profile does not say works", f"{name}=0")]
    return []


def gpudirect(f: JobFacts) -> list[RuleFinding]:
    """GPUDirect settings consistent with the fabric, the GPU<->NIC path and the image."""
    set_gdr = [n for n in (*GDR_VARS, *PSM2_GPU_VARS) if n in f.env]
    if f.device != "cuda" or not f.rdma:
        where = f"fabric {f.fabric}" if not f.rdma else "a CPU job"
        return [_refuse("gpudirect", f"{', '.join(set_gdr)} set on {where}, where no GPUDirect RDMA happens",
                        "leave them out")] if set_gdr else []
    found = _psm2(f)
    if not f.image.nccl_present:
        return found
    level, path, wanted = _gdr_level(f), farthest_path(f.node, f.fabric), gdr_variable(f.image.nccl)
    if level is None:
        if path is not None:
            found.append(_refuse("gpudirect", f"the GPU<->NIC path on {f.system}'s {f.fabric} is {path}, and the job "
                                 "states no NCCL GPUDirect level (NCCL's default, PXB, decides silently)",
                                 f"set {wanted} (0 off, 3 PHB, 5 SYS)"))
        else:
            found.append(_assume("gpudirect", f"the GPU<->NIC path on {f.system}'s {f.fabric} is not in the profile, "
                                 "so NCCL's default GPUDirect level (PXB: only behind a PCIe switch) decides; "
                                 "`nvidia-smi topo -m` on a node shows the path"))
        return found
    name, value = level
    if value:
        found.append(_assume("gpudirect", f"GPUDirect RDMA on {f.fabric} needs the GPU peer-memory driver "
                             "(nvidia-peermem or nv_peer_mem) on every node; without it NCCL stages through host "
                             "memory (NCCL_DEBUG=INFO says which)"))
    if name != wanted:
        found.append(_refuse("gpudirect", f"{name} is not read by image {f.image.name}'s NCCL {f.image.nccl}",
                             f"{wanted}={value}"))
    return found + (_level_against_path(f, name, value, path) if path is not None else [])


def locked_memory(f: JobFacts) -> list[RuleFinding]:
    """RDMA fabrics register memory: locked memory unlimited inside the container."""
    if f.rdma and not f.memlock_raised:
        return [_refuse("locked-memory", f"fabric {f.fabric} registers memory for RDMA, and the job does not raise "
                        "locked memory (ulimit -l) inside the container", "render the ranks with dlrun's memlock "
                        "prelude (dlrun.render.memlock_argv)")]
    return []


def cuda_target(f: JobFacts) -> list[RuleFinding]:
    """The image's CUDA targets the GPU's compute capability, and the driver runs that CUDA."""
    if f.device != "cuda":
        return []
    image, node = f.image, f.node
    gpu = f"{node.gpu_model or 'the GPU'}"
    if not image.cuda_known:
        what = "is the host's own Python" if image.kind == "host" else "does not describe its stack"
        return [_assume("cuda-target", f"image {image.name} {what}: its CUDA and the driver are checked on the "
                        "node (`dlrun doctor`)")]
    if image.cuda is None:
        return [_refuse("cuda-target", f"image {image.name} has no CUDA, but the job runs on the {node.gpus} "
                        f"{gpu} GPU(s) of {f.system}", "an image with CUDA (dlrun images list)")]
    cc = node.compute_capability
    if cc is None:
        return [_assume("cuda-target", f"the compute capability of {f.system}'s {gpu} is not in the profile: "
                        f"CUDA {image.cuda} is assumed to target it")]
    found = []
    targets = cuda_table.targets(image.cuda, cc)
    row = cuda_table.release_of(image.cuda)
    if targets is False:
        first = cuda_table.first_release_for(cc)
        span = f"{row.lowest_cc}-{row.highest_cc}" if row else "?"
        found.append(_refuse("cuda-target", f"image {image.name}'s CUDA {image.cuda} compiles for compute capability "
                             f"{span}, but {f.system}'s {gpu} is compute capability {cc}: no native kernels (PTX "
                             "JIT would run other code than what is compared)",
                             f"an image with CUDA >= {first.version}" if first else "an image whose CUDA targets it"))
    elif targets is None:
        found.append(_assume("cuda-target", f"CUDA {image.cuda} is not in dlrun's table: assumed to target compute "
                             f"capability {cc}"))
    return found + _driver(f)


def _driver(f: JobFacts) -> list[RuleFinding]:
    image, node = f.image, f.node
    row = cuda_table.release_of(image.cuda or "")
    need = f"CUDA {image.cuda} needs driver >= {row.min_driver}" if row else f"CUDA {image.cuda}'s driver"
    compat = (f" or R{', R'.join(str(cuda_table.version_tuple(d)[0]) for d in image.forward_compat)} on a data-center "
              "GPU (the image's forward-compatibility package)") if image.forward_compat else ""
    if node.driver is None:
        return [_assume("cuda-driver", f"{f.system}'s driver is not in the profile: {need}{compat}")]
    ok, how = cuda_table.driver_ok(image.cuda or "", node.driver, list(image.forward_compat),
                                   cuda_table.is_datacenter(node.gpu_model))
    if ok is False:
        return [_refuse("cuda-driver", f"{f.system}'s driver {node.driver} is too old for image {image.name}: {how}",
                        "a newer driver on the nodes, or an image with an older CUDA")]
    return []


def container_reference(f: JobFacts) -> list[RuleFinding]:
    """A container reference every compute node can resolve."""
    if not f.runs_elsewhere or f.reference_kind == "none":
        return []
    if f.reference_kind == "registry" and (is_loopback_registry(f.reference) or "localhost#" in f.reference):
        return [_refuse("container-reference", f"the compute nodes would pull {f.reference}, from a registry on "
                        "this machine only", "push the image to a registry the nodes reach (dlrun images push NAME "
                        "--to REGISTRY), or keep its file on the shared file system (dlrun images pull)")]
    if f.reference_kind == "file":
        return [_assume("container-reference", f"{f.reference} is on a file system every compute node mounts")]
    if f.reference_kind == "engine":
        return [_assume("container-reference", f"every compute node's container engine holds image {f.reference} "
                        "(dlrun images load on each node)")]
    return []


def root_only(f: JobFacts) -> list[RuleFinding]:
    """Root-only switches only where the job runs as root."""
    if f.root_vars and not f.runs_as_root:
        return [_refuse("root-only", f"the job sets {', '.join(f.root_vars)}, but runs as a user, not root",
                        "leave them out (Plan.runs_as_root decides)")]
    return []


def launcher_session(f: JobFacts) -> list[RuleFinding]:
    """MPI ranks in containers reach the PMIx server of the host launcher that started them."""
    if f.loads_mpi and not f.joins_launcher_session:
        return [_refuse("launcher-session", "the ranks initialise MPI through the host launcher's PMIx server, which "
                        "the runtime's containers cannot reach (PID namespace, server directory, user)",
                        "--runtime docker or podman (they join it), singularity or charliecloud")]
    return []


RULES: dict[str, Rule] = {
    "cpu-threads": cpu_threads, "gpu-socket": gpu_socket, "gpudirect": gpudirect, "locked-memory": locked_memory,
    "cuda-target": cuda_target, "container-reference": container_reference, "root-only": root_only,
    "launcher-session": launcher_session,
}


def check(facts: JobFacts) -> list[RuleFinding]:
    return [finding for rule in RULES.values() for finding in rule(facts)]
