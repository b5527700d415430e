"""Names and overrides -> one Plan, through a pipeline of small resolvers.

`resolve_plan` checks the options generically against their declarations (dlrun.runoptions: type, minimum,
choices), looks the names up in the catalogs, then runs each resolver of RESOLVERS in order. A resolver reads
the request, the catalog entries and the fields resolved before it, and returns the Plan fields it decides;
each is a plain function that tests can call on its own.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dlrun.catalog import Catalog
from dlrun.catalog.models import TF2_HARNESS_MODELS, ImageSpec, SystemSpec, WorkloadSpec
from dlrun.catalog.partitions import select as select_partition
from dlrun.errors import UsageError
from dlrun.harness.harness_contract import CODE_PRECISIONS, GPU_ONLY_PRECISIONS
from dlrun.nodemodel import node_model, rank_affinity, threads_per_rank
from dlrun.plan import inputs
from dlrun.plan.backends import resolve_backends
from dlrun.plan.finish import FINISHING, SiteInputs, tuned
from dlrun.plan.jobuser import runs_as_root
from dlrun.plan.resolved import LocalImage, Plan
from dlrun.runoptions import KNOBS, RESOLVERS, Request, options_for, request
from dlrun.tfcnn.knobs import resolve_tf_options


@dataclass
class Resolution:
    """What the resolvers share: the request, the catalog entries it names, and the fields decided so far."""

    catalog: Catalog
    request: Request
    workload: WorkloadSpec
    system: SystemSpec
    image: ImageSpec
    fields: dict[str, Any] = field(default_factory=dict)
    #: What the site adds beyond the options (dlrun.plan.finish): inputs of the finishing resolvers.
    site: SiteInputs = field(default_factory=SiteInputs)

    @property
    def world(self) -> int:
        return self.fields["nodes"] * self.fields["ranks_per_node"]


Resolver = Callable[[Resolution], Mapping[str, Any]]


def resolve_plan(catalog: Catalog, workload: str, *, local_image: LocalImage | None = None,
                 site: SiteInputs | None = None, **options: Any) -> Plan:
    """The plan for `workload` with these options (names and meanings: dlrun.runoptions), finished with what
    the site adds (dlrun.plan.finish.SiteInputs: secrets of dlrun's environment, the matmul ceiling, this
    machine's tuning decision). `local_image` (or `site.local_image`) adds this site's copy of a container
    image (its recorded digest and local files); without it the image is used as the catalog describes it.
    The only place a Plan is made: nothing edits it afterwards."""
    site = site or SiteInputs()
    local_image = local_image or site.local_image
    req = request(options)
    work = catalog.workload(workload)
    system = select_partition(catalog.system(req.system or "localhost"), req.partition)
    image = catalog.image(req.image or system.default_image)
    res = Resolution(catalog=catalog, request=req, workload=work, system=system, image=image, site=site)
    check_names(res)
    arch = req.arch or system.arch
    if image.kind == "container" and local_image is not None:
        res.image = local_image(image, arch)
    res.fields.update(workload=work, image=res.image, system=system, image_arch=arch)
    for name in RESOLVERS[1:]:
        res.fields.update(PIPELINE[name](res))
    for finishing in FINISHING:
        res.fields.update(finishing(res))
    return tuned(Plan(**res.fields), res.fields, site)


def check_names(res: Resolution) -> None:
    """The image fits the system and the workload (tf_cnn_benchmarks and TF 2 harness models, frameworks)."""
    work, img, catalog = res.workload, res.image, res.catalog
    check_arch(res)
    if img.framework not in ("pytorch", "tensorflow"):
        raise UsageError(f"image {img.name!r} has framework {img.framework!r}, which no dlrun workload command "
                         "runs; valid: pytorch, tensorflow")
    tf_cnn = img.framework == "tensorflow" and img.harness_framework is None
    check_storage_image(res)
    if work.kind == "command":  # the site's own program: any image of the system's architecture runs it
        return
    if tf_cnn and not work.tf_cnn_model and work.kind != "nccl-tests":
        valid = sorted(w.name for w in catalog.workloads.values() if w.tf_cnn_model)
        raise UsageError(f"workload {work.name!r} has no tf_cnn_benchmarks model, which image {img.name!r} "
                         f"(TensorFlow) runs; valid workloads for it: {', '.join(valid)}")
    if img.harness_framework == "tensorflow" and not (work.trains and work.model in TF2_HARNESS_MODELS):
        valid = sorted(w.name for w in catalog.workloads.values() if w.trains and w.model in TF2_HARNESS_MODELS)
        raise UsageError(f"workload {work.name!r} has no model in dlrun's TensorFlow 2 harness, which image "
                         f"{img.name!r} runs; valid workloads for it: {', '.join(valid)}")
    for name in KNOBS:  # the PyTorch harness's knobs
        if img.framework == "tensorflow" and name != "threads" and res.request.is_given(name):
            raise UsageError(f"--{name.replace('_', '-')} {res.request[name]} applies to dlrun's PyTorch harness, "
                             f"but image {img.name!r} runs TensorFlow; valid for it: auto")


def check_arch(res: Resolution) -> None:
    """The image is built for the architecture asked for (--arch, else the system's); another than the
    system's is a container image's, run emulated where the node can (checked on the node: dlrun.preflight)."""
    system, img = res.system, res.image
    arch = res.request.arch or system.arch
    if arch != system.arch and img.kind != "container":
        raise UsageError(f"--arch {arch}: image {img.name!r} is the host's own software, which runs as the system's "
                         f"{system.arch}; valid: --arch {system.arch}, or a container image")
    if arch not in img.arch:
        asked = f"--arch {arch}" if res.request.arch else f"system {system.name!r} is {system.arch}"
        raise UsageError(f"image {img.name!r} is built for {', '.join(img.arch)}, but {asked}")


def check_storage_image(res: Resolution) -> None:
    """A storage workload runs the harness's storage reader, which ships with the PyTorch harness."""
    work, system, img = res.workload, res.system, res.image
    if work.kind == "storage" and img.harness_framework != "pytorch":
        valid = sorted(name for name, other in res.catalog.images.items()
                       if other.harness_framework == "pytorch" and system.arch in other.arch)
        raise UsageError(f"workload {work.name!r} runs the harness's storage reader, which image {img.name!r} "
                         f"lacks; valid: {', '.join(f'--image {name}' for name in valid) or 'a PyTorch harness image'}")


def resolve_layout(res: Resolution) -> dict[str, Any]:
    """Nodes, ranks per node, the device and threads per rank, within what the system has."""
    req, system = res.request, res.system
    nodes = req.nodes
    if nodes > system.nodes:
        part = f" partition {system.partition!r}" if system.partition else ""
        raise UsageError(f"--nodes {nodes} exceeds system {system.name!r}{part}, which has {system.nodes} node(s); "
                         f"valid: 1..{system.nodes}, or --system NAME for a larger system (see dlrun systems list)")
    # --dist dataparallel: one process per node drives all of its GPUs
    storage = res.workload.kind == "storage"  # one reading process, no device
    ranks = req.ranks_per_node or (1 if req.dist == "dataparallel" or storage else system.gpus_per_node) or 1
    per_node_limit = system.gpus_per_node or system.cpu.cores * system.cpu.threads_per_core
    unit = "GPU(s)" if system.gpus_per_node else "CPU(s)"
    if ranks > per_node_limit:
        raise UsageError(f"--ranks-per-node {ranks} exceeds the {per_node_limit} {unit} per node of "
                         f"system {system.name!r}; valid: 1..{per_node_limit}")
    if storage and nodes * ranks != 1:
        raise UsageError(f"workload {res.workload.name!r} reads storage with one process, got {nodes * ranks} "
                         f"({nodes} node(s) x {ranks}); valid: --nodes 1 --ranks-per-node 1")
    if not res.workload.trains and res.workload.kind not in ("command", "storage") and nodes * ranks < 2:
        raise UsageError(f"workload {res.workload.name!r} measures {res.workload.measures} between ranks and needs "
                         f"at least 2, got {nodes * ranks} ({nodes} node(s) x {ranks}); valid: --ranks-per-node 2 "
                         "or more, or --nodes 2 or more")
    device = "cuda" if system.gpus_per_node and not storage else "cpu"
    return {"nodes": nodes, "ranks_per_node": ranks, "device": device,
            "threads_per_rank": req.threads or default_threads(system, ranks, device, req.fabric, req.dist)}


def default_threads(system: SystemSpec, ranks: int, device: str, fabric: str | None, dist: str | None) -> int:
    """Threads per rank that fit the cores each rank is bound to (dlrun.nodemodel.binding): two ranks bound to
    one 20-core socket get 10 each, not 20."""
    affinity = rank_affinity(node_model(system), inputs.fabric_name(system, fabric), device, dist)
    return threads_per_rank(node_model(system), ranks, affinity.numa if affinity else None)


def resolve_batch(res: Resolution) -> dict[str, Any]:
    """Batch per rank (given, from the global batch, or the system's/workload's) and the step counts."""
    req, work, system = res.request, res.workload, res.system
    nodes, ranks, world = res.fields["nodes"], res.fields["ranks_per_node"], res.world
    batch, total = req.batch_size, req.global_batch_size
    if not work.trains and work.kind != "command" and (batch is not None or total is not None
                                                       or req.is_given("precision")):
        per = "timed and untimed passes over the files" if work.kind == "storage" else "per message size"
        raise UsageError(f"workload {work.name!r} trains no model; --batch-size, --global-batch-size and "
                         f"--precision do not apply (valid: --steps and --warmup-steps, {per})")
    if batch is not None and total is not None:
        raise UsageError("give either --batch-size (per rank) or --global-batch-size, not both")
    if total is not None:
        if total % world:
            lower = total - total % world
            choices = f"{lower} or {lower + world}" if lower else f"{world}"
            raise UsageError(f"--global-batch-size {total} does not divide over {world} ranks "
                             f"({nodes} node(s) x {ranks}); valid: a multiple of {world}, e.g. {choices}")
        batch = total // world
    if batch is None:
        batch = system.batch_sizes.get(work.name) or system.default_batch_size or work.default_batch_size
    # A system's default steps are training steps; a collective's are iterations per message size.
    sys_steps, sys_warmup = (system.default_steps, system.default_warmup_steps) if work.trains else (None, None)
    return {"batch_size": batch, "steps": _first(req.steps, sys_steps, work.default_steps),
            "warmup_steps": _first(req.warmup_steps, sys_warmup, work.default_warmup_steps)}


def _first(*values: int | None) -> int:
    return next(value for value in values if value is not None)


def resolve_data(res: Resolution) -> dict[str, Any]:
    """--data (with --stage-data) as the plan's dataset, the user's binds, the data-loader workers."""
    req = res.request
    binds = [inputs.parse_bind(spec) for spec in req.bind]
    data = inputs.declared_dataset(res.system, req.data, stage=req.stage_data) or inputs.dataset(
        req.data, stage=req.stage_data)
    if data is None and res.workload.kind == "storage":
        raise UsageError(f"workload {res.workload.name!r} reads the files of a directory, and no --data names one; "
                         "valid: --data DIR (dlrun data synth OUT --format storage writes one)")
    inputs.check_binds(binds, data)
    workers = res.system.data_loader_workers if req.data_workers is None else req.data_workers
    return {"data": data, "binds": binds, "data_workers": workers}


def resolve_environment(res: Resolution) -> dict[str, Any]:
    """--env and --secret-env: the ranks' extra environment, and which of it is secret."""
    env = dict(inputs.parse_env(spec) for spec in res.request.env)
    secret = res.request.secret_env
    unset = [name for name in secret if name not in env]
    if unset:
        raise UsageError(f"--secret-env {unset[0]} has no value; valid: a variable set in dlrun's environment, "
                         f"or --secret-env {unset[0]}=VALUE")
    return {"env": env, "secret_env": sorted(set(secret))}


def _resolve_backends(res: Resolution) -> dict[str, Any]:
    backends = resolve_backends(res.catalog, res.request, res.workload, res.image, res.system, world=res.world)
    return {**backends, "runs_as_root": runs_as_root(backends["scheduler"])}


def resolve_fabric(res: Resolution) -> dict[str, Any]:
    """The fabric (given, or the system's default) and the host devices it needs inside containers."""
    fabric = inputs.fabric_name(res.system, res.request.fabric)
    return {"fabric": fabric, "devices": inputs.fabric_devices(res.system, fabric, res.fields["device"])}


def resolve_scheduler(res: Resolution) -> dict[str, Any]:
    """--partition, --account, --time, --exclusive, --nodelist over the system's scheduler options."""
    req = res.request
    return {"scheduler_options": inputs.scheduler_options(
        res.system.scheduler_options, partition=req.partition, account=req.account, time_limit=req.time,
        exclusive=req.exclusive, nodelist=req.nodelist)}


def resolve_framework(res: Resolution) -> dict[str, Any]:
    """Precision, allocator, and tf_cnn_benchmarks' own knobs checked against the image (dlrun.tfcnn.knobs)."""
    req = res.request
    tf_options = resolve_tf_options(
        res.image, nodes=res.fields["nodes"], world=res.world, device=res.fields["device"],
        variable_update=req.variable_update, all_reduce_spec=req.all_reduce_spec, ps=req.ps,
        data_format=req.data_format, benchmark_args=list(req.benchmark_arg))
    knobs = {name: req[name] for name in KNOBS if name != "threads"}
    pytorch = res.image.harness_framework == "pytorch" and res.workload.trains
    tune = req.tune or os.environ.get("DLRUN_TUNE") or "auto"
    if tune not in ("auto", "off"):
        raise UsageError(f"bad $DLRUN_TUNE {tune!r}; valid: auto, off")
    precision = check_precision(req.precision, res.image, res.fields["device"])
    if knobs["fused_bn_relu"] == "on":
        check_fused_bn_relu(knobs, precision, res.fields["device"])
    return {"precision": precision, **knobs, "tune": tune,
            "knob_sources": {name: "asked for" if req.is_given(name) else "default" for name in KNOBS} if pytorch
            else {}, **tf_options}


def check_fused_bn_relu(knobs: dict[str, Any], precision: str, device: str) -> None:
    """--fused-bn-relu on, refused where the run's other choices keep the kernel out (the harness would exit 2)."""
    conflict = ("a CPU kernel, and this run trains on GPUs" if device == "cuda" else
                f"the kernel computes in fp32, not --precision {precision}" if precision != "fp32" else
                "the kernel takes channels-last, not --channels-last off" if knobs["channels_last"] == "off" else
                "torch.compile compiles PyTorch's ops instead (--compile on)" if knobs["compile"] == "on" else None)
    if conflict:
        raise UsageError(f"--fused-bn-relu on: {conflict}; valid here: auto, off")




def check_precision(precision: str, image: ImageSpec, device: str) -> str:
    """--precision, if the image's benchmark code and the plan's device can run it (never something else)."""
    code = image.harness_framework or ("tf_cnn_benchmarks" if image.framework == "tensorflow" else "pytorch")
    valid = [p for p in CODE_PRECISIONS[code] if device == "cuda" or p not in GPU_ONLY_PRECISIONS]
    if precision not in valid:
        where = "CPUs" if device == "cpu" else "GPUs"
        raise UsageError(f"--precision {precision}: {code} on {where} (image {image.name!r}) cannot train in it; "
                         f"valid: {', '.join(valid)}")
    return precision


#: The sampler's limits (dlrun.telemetry): finer than 50 ms costs more than it tells; coarser than an hour says nothing.
TELEMETRY_PERIODS = (0.05, 3600.0)
DEFAULT_TELEMETRY_PERIOD = 1.0


def resolve_telemetry(res: Resolution) -> dict[str, Any]:
    """--telemetry off|PERIOD: seconds between the per-node samples, or None for none."""
    given = res.request.telemetry
    if given is None:
        return {"telemetry_period": DEFAULT_TELEMETRY_PERIOD}
    if str(given).strip().lower() == "off":
        return {"telemetry_period": None}
    low, high = TELEMETRY_PERIODS
    try:
        period = float(given)
    except ValueError:
        period = float("nan")
    if not low <= period <= high:  # also refuses nan and inf
        raise UsageError(f"bad --telemetry {given!r}; valid: off, or seconds from {low:g} to {high:g}")
    return {"telemetry_period": period}


def resolve_training(res: Resolution) -> dict[str, Any]:
    """--seq-length and --activation-checkpointing (LLMs), --grad-accum, --checkpoint-every/--checkpoint-dir,
    and what --dist fsdp/dataparallel need."""
    req, work, dist = res.request, res.workload, res.fields.get("dist")
    llm_only = [opt for opt in ("seq_length", "activation_checkpointing") if req.is_given(opt)]
    if llm_only and work.kind != "llm-pretraining":
        flag = "--" + llm_only[0].replace("_", "-")
        raise UsageError(f"{flag} applies to LLM workloads, not workload {work.name!r} ({work.kind}); valid: "
                         "llama3_tiny, llama3_1b, llama3_8b (dlrun workloads list)")
    trained = [opt for opt in ("grad_accum", "checkpoint_every", "checkpoint_dir") if req.is_given(opt)]
    if trained and (not work.trains or res.image.harness_framework != "pytorch"):
        raise UsageError(f"--{trained[0].replace('_', '-')} applies to training in dlrun's PyTorch harness, not "
                         f"workload {work.name!r} on image {res.image.name!r}; valid: leave it out")
    if req.is_given("checkpoint_dir") and req.checkpoint_every is None:
        raise UsageError(f"--checkpoint-dir {req.checkpoint_dir} says where checkpoints go, but none is saved; "
                         "valid: add --checkpoint-every N")
    if dist == "dataparallel":
        check_dataparallel(res)
    elif req.dataparallel_gpus is not None:
        raise UsageError(f"--dataparallel-gpus {req.dataparallel_gpus} applies to --dist dataparallel, not "
                         f"--dist {dist}; valid: leave it out, or add --dist dataparallel")
    binds = list(res.fields.get("binds") or [])
    folder = req.checkpoint_dir
    if folder is not None:
        if not folder.startswith("/"):
            raise UsageError(f"bad --checkpoint-dir {folder!r}; valid: an absolute path (it is bound read-write "
                             "at the same path)")
        binds.append(inputs.parse_bind(f"{folder}:{folder}:rw"))
    return {"seq_length": req.seq_length, "grad_accum": req.grad_accum,
            "activation_checkpointing": bool(req.activation_checkpointing), "checkpoint_every": req.checkpoint_every,
            "checkpoint_dir": folder, "binds": binds, "dataparallel_gpus": req.dataparallel_gpus}


def check_dataparallel(res: Resolution) -> None:
    """torch.nn.DataParallel: one process per node over that node's GPUs; nothing to spread on a CPU."""
    if res.fields["device"] != "cuda":
        raise UsageError(f"--dist dataparallel spreads one process over a node's GPUs, but system "
                         f"{res.system.name!r} has none; valid: --dist ddp (or fsdp) on CPUs")
    wanted, per_node = res.request.dataparallel_gpus, res.system.gpus_per_node
    if wanted is not None and wanted > per_node:
        raise UsageError(f"--dataparallel-gpus {wanted} exceeds the {per_node} GPU(s) per node of system "
                         f"{res.system.name!r}; valid: 1..{per_node}")
    if res.fields["ranks_per_node"] != 1:
        raise UsageError(f"--dist dataparallel runs one process per node, got --ranks-per-node "
                         f"{res.fields['ranks_per_node']}; valid: --ranks-per-node 1 (or leave it out)")


def resolve_harness(res: Resolution) -> dict[str, Any]:
    """The options that only reach the harness (a harness flag, no Plan field of their own), as checked."""
    return {"harness_options": {opt.name: res.request[opt.name] for opt in options_for("harness")}}


#: Every resolver of dlrun.runoptions.RESOLVERS ("names" runs first, in resolve_plan itself).
PIPELINE: dict[str, Resolver] = {
    "layout": resolve_layout, "batch": resolve_batch, "data": resolve_data, "environment": resolve_environment,
    "backends": _resolve_backends, "fabric": resolve_fabric, "scheduler": resolve_scheduler,
    "framework": resolve_framework, "training": resolve_training, "telemetry": resolve_telemetry,
    "harness": resolve_harness,
}
