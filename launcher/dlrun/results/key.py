"""The comparability key: what decides a stored run's value, as data, plus a stable hash of it.

Two runs are like-for-like when their keys are equal. A field the record cannot tell (a log imported from
another tool rarely names its image or precision) is `unknown`, and `unknown` never counts as equal, not
even to another `unknown`: the differences list says "cannot tell whether they match" instead. A field
that does not apply (the batch size of an all-reduce) is `n/a`, which does compare equal.

Fields (in the order they are printed):
  workload           the dlrun workload, or for an imported log its format (and collective)
  model              the model variant the harness trained (tf_cnn_benchmarks naming), the collective of a
                     communication benchmark, or `n/a`
  precision          fp32, amp(bfloat16), amp(float16) for training; the element type of a collective
  batch_per_device   samples per device per step (`n/a` for communication)
  global_batch       samples per step over all devices
  data               synthetic, or real:<dataset>; data_format: the on-disk format of real data; a storage
                     or command run's: path:<the --data directory> (a storage run's data_format: fs:<type>)
  framework          pytorch, tensorflow, pytorch/horovod (the harness with --dist horovod); for collectives
                     the library and backend (pytorch/gloo, nccl-tests); `command` (model: `command <hash>`)
  framework_version  the version the run reported (else the image's pinned one), +horovod<version> with Horovod
  image_digest       the image's content digest; for the `host` image (no container) the sha256 of the
                     harness file stands in (`host:harness-<16 hex digits>`), next to the framework version
  devices, nodes     devices that did the work, and the nodes they sat on
  system             the system profile
  partition          the batch partition (queue) the job asked for, whose nodes the plan modelled (a system's
                     `partitions`); `n/a` where it named none (a local run, the scheduler's default); stored keys
                     of runs from before partitions lack it and read as `unknown`
  fabric             the inter-node fabric; `n/a` on one node, where no traffic crosses it
  env                the run's --env variables that decide performance (NCCL_*, UCX_*, OMP_*, ...: the rule is
                     dlrun.results.performance_env), `none`; never a secret
  code_path          which code computed a step of dlrun's PyTorch harness: `reference` (PyTorch's own ops, its
                     default layout, eager) or the knobs it moved (`channels_last=on fused_bn_relu=on`),
                     however they were chosen; runs of different code paths are never pooled
  site               the site that made the run (dlrun.results.site)
  cpu, cpu_id, isa, cores, memory_gib, gpu, gpu_count, gpu_memory_gib, driver, cuda, cudnn, nccl, fabric_rate
                     the machine: its hardware fingerprint (dlrun.results.fingerprint): CPU model name, its
                     identity (vendor, family, model, stepping: a cloud VM's name alone hides the generation)
                     and instruction-set level (x86-64-v4+avx512_bf16...; `ppc64le emulated on x86_64` for code
                     run under qemu: never pooled with a native run), sockets x cores per socket, memory;
                     GPU model, GPUs per node, GPU memory, driver (`none` and `n/a`
                     without GPUs); the CUDA, cuDNN and NCCL the job saw (`n/a` for a run on CPUs); the
                     fabric's line rate per port (`n/a` on one node). Unknown for runs stored before dlrun
                     kept fingerprints and for logs whose machine nobody named; `n/a` for model facts, which
                     no machine decides

A tf_cnn_benchmarks run's framework carries the settings that decide its value after a slash, as a collective's
carries its backend: `tensorflow/parameter_server ps=4 layout=NCHW` (variable update, all-reduce spec,
parameter servers, tensor layout, pass-through flags; see dlrun.tfcnn.knobs). The PyTorch harness's placement
knobs (allocator, threads, pinning, cuDNN's search) enter it only where the user pinned them (`pytorch pinned:
allocator=jemalloc`; see dlrun.tune).
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from dlrun.catalog.models import TRAINING_KINDS
from dlrun.harness.harness_contract import CODE_PATH_KNOBS, code_path, precision_label
from dlrun.results.fingerprint import arch_label
from dlrun.results.key_software import NOT_APPLICABLE, UNKNOWN, data_fields, framework_version, image_identity
from dlrun.results.parsers.result import SECONDARY_METRICS
from dlrun.results.performance_env import performance_env
from dlrun.tfcnn.knobs import key_part


#: Field -> how it is named in sentences.
KEY_FIELDS: dict[str, str] = {
    "workload": "workload", "model": "model variant", "precision": "precision",
    "batch_per_device": "batch per device", "global_batch": "global batch", "data": "data",
    "data_format": "data format", "framework": "framework", "framework_version": "framework version",
    "image_digest": "image digest", "devices": "devices", "nodes": "nodes", "system": "system",
    "partition": "partition", "fabric": "fabric", "env": "performance environment", "code_path": "code path",
    "site": "site",
}
#: The machine's fields (its hardware fingerprint, dlrun.results.fingerprint), in KEY_FIELDS too.
MACHINE_FIELDS: dict[str, str] = {
    "cpu": "cpu", "cpu_id": "cpu identity", "isa": "instruction set", "cores": "cores (sockets x cores)",
    "memory_gib": "memory (GiB)", "gpu": "gpu",
    "gpu_count": "gpus per node", "gpu_memory_gib": "gpu memory (GiB)", "driver": "driver", "cuda": "cuda",
    "cudnn": "cudnn", "nccl": "nccl", "fabric_rate": "fabric rate",
}
#: The machine's fields that the image (not the node) decides: they differ along the image axes.
STACK_FIELDS = ("cuda", "cudnn", "nccl")
KEY_FIELDS.update(MACHINE_FIELDS)
#: Key fields no run option decides (those the options decide are declared in dlrun.runoptions).
NOT_FROM_OPTIONS = {"workload": "the workload argument",  # model: the workload's, with an LLM's --seq-length
                    "env": "the --env variables of the families that decide performance (dlrun.results."
                           "performance_env)",
                    "code_path": "the code-path knobs the run used, however they were chosen (asked for, tuned, "
                                 "default)",
                    "site": "the site that ran it (DLRUN_SITE, config.yaml's site:, the host's domain)",
                    **{name: "the node the job ran on, and the software stack it saw" for name in MACHINE_FIELDS}}

Key = dict[str, Any]

# Element types as nccl-tests prints them -> the names the harness uses.
_DTYPES = {"float": "float32", "half": "float16", "double": "float64", "bfloat16": "bfloat16"}
# Formats whose logs say which framework produced them.
_FRAMEWORK_OF_FORMAT = {"tf_cnn_benchmarks": "tensorflow", "nccl-tests": "nccl-tests"}


def _known(value: Any) -> Any:
    return UNKNOWN if value is None or value == "" else value


def _count(value: Any) -> int | str:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else UNKNOWN


def run_kind(run: Mapping[str, Any], result: Mapping[str, Any]) -> str:
    """training | communication | matmul | command | storage, from the result's metric (else the plan)."""
    metric = result.get("metric")
    plan = run.get("plan") or {}
    workload = plan.get("workload") if isinstance(plan.get("workload"), dict) else {}
    if metric == "matmul" or run.get("workload") == "matmul":
        return "matmul"
    if workload.get("kind") in ("command", "storage"):
        return str(workload["kind"])
    if metric == "busbw" or workload.get("kind") not in (None, *TRAINING_KINDS) or plan.get("collective"):
        return "communication"
    return "training"


@dataclass(frozen=True)
class _Record:
    """The parts of a stored run that the key is read from, looked up once."""

    run: Mapping[str, Any]
    result: Mapping[str, Any]
    extra: Mapping[str, Any]
    plan: Mapping[str, Any]
    image: Mapping[str, Any]
    workload: Mapping[str, Any]
    kind: str
    imported: bool  # a log of another tool, imported with `dlrun results import-log`
    fmt: str | None  # that log's format (None for runs dlrun made)


def _record(run: Mapping[str, Any], results: list[Mapping[str, Any]]) -> _Record:
    result = next((r for r in results if r.get("metric") not in SECONDARY_METRICS), results[0] if results else {})
    plan = run.get("plan") or {}
    provenance = run.get("provenance") or {}
    imported = (run.get("origin") or plan.get("origin") or provenance.get("origin")) == "import-log"
    return _Record(run=run, result=result, extra=_mapping(result.get("extra")), plan=plan,
                   image=_mapping(plan.get("image")), workload=_mapping(plan.get("workload")),
                   kind=run_kind(run, result), imported=imported, fmt=plan.get("format") if imported else None)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def key_from_run(run: Mapping[str, Any], results: Iterable[Mapping[str, Any]] = ()) -> Key:
    """The key of a stored run: its columns, `plan`, `provenance` and result rows (as `Store.add_run`
    takes them). Works for runs dlrun launched, logs imported from other tools and matmul measurements."""
    rec = _record(run, list(results))
    key: Key = _where(rec)
    if rec.kind == "training":
        key.update(_training(rec, key["devices"]))
    elif rec.kind == "communication":
        key.update(_communication(rec))
    elif rec.kind == "command":
        key.update(_command(rec, key["devices"]))
    elif rec.kind == "storage":
        key.update(_storage(rec))
    else:
        key.update(model=NOT_APPLICABLE, precision=_training_precision(run.get("precision"), rec.result.get("dtype")),
                   framework=_known(rec.result.get("framework")), **_NO_BATCH)
    key["framework_version"] = framework_version(rec.kind, rec.fmt, rec.result, rec.extra, rec.image)
    if rec.kind == "training" and rec.extra.get("dist") == "horovod" and rec.extra.get("horovod_version") \
            and key["framework"].startswith("pytorch/"):
        key["framework_version"] = f"{key['framework_version']}+horovod{rec.extra['horovod_version']}"
    key["image_digest"] = image_identity(run, rec.image, run.get("provenance") or {})
    key["site"] = _known(run.get("site"))
    key.update(env=_env(rec), code_path=_code_path(rec))
    key.update(_machine(rec, key["nodes"]))
    return {name: key[name] for name in KEY_FIELDS}


def _env(rec: _Record) -> str:
    """The run's own variables that decide performance (dlrun.results.performance_env), as its plan holds them;
    unknown where the plan holds none (a log imported without the plan `dlrun run` would resolve for it)."""
    if rec.plan.get("kind") == "model-facts":
        return NOT_APPLICABLE
    env = rec.plan.get("env")
    if not isinstance(env, dict):
        return UNKNOWN
    return performance_env({str(k): str(v) for k, v in env.items()}, rec.plan.get("secret_env") or ())


def _code_path(rec: _Record) -> str:
    """Which code computed a training step of dlrun's PyTorch harness: `reference` (PyTorch's own ops, its
    default layout, eager) or the code-path knobs it moved, from the knobs its result recorded. n/a for other
    code (tf_cnn_benchmarks, collectives, a site's command); unknown for runs that did not record them."""
    harness = (rec.extra.get("framework") or rec.image.get("framework")) == "pytorch"
    if rec.kind != "training" or rec.imported or not harness:
        return NOT_APPLICABLE
    return code_path(rec.extra.get("knobs") if isinstance(rec.extra.get("knobs"), dict) else {}) or UNKNOWN


def _machine(rec: _Record, nodes: Any) -> Key:
    """The machine's fields from the run's fingerprint (see the module notes for unknown and n/a)."""
    if rec.plan.get("kind") == "model-facts":
        return dict.fromkeys(MACHINE_FIELDS, NOT_APPLICABLE)  # counted on the model: no machine decides it
    fp = rec.run.get("fingerprint") if isinstance(rec.run.get("fingerprint"), dict) else {}
    sockets, per_socket = fp.get("sockets"), fp.get("cores_per_socket")
    gpus, on_cpu = fp.get("gpu_count"), fp.get("device") == "cpu"
    no_gpu = gpus == 0
    rate = fp.get("fabric_rate_gbps")
    return {
        "cpu": _known(fp.get("cpu")), "cpu_id": _known(fp.get("cpu_id")),  # emulated: another arch's instructions
        "isa": _known(arch_label(fp) if fp.get("emulated_on") else fp.get("isa")), "cores": f"{sockets}x{per_socket}" if isinstance(sockets, int) and isinstance(per_socket, int) else UNKNOWN,
        "memory_gib": _count(fp.get("memory_gib")),
        "gpu": "none" if no_gpu else _known(fp.get("gpu")),
        "gpu_count": gpus if isinstance(gpus, int) and not isinstance(gpus, bool) and gpus >= 0 else UNKNOWN,
        "gpu_memory_gib": NOT_APPLICABLE if no_gpu else _count(fp.get("gpu_memory_gib")),
        "driver": NOT_APPLICABLE if no_gpu else _known(fp.get("driver")),
        **{name: NOT_APPLICABLE if on_cpu or no_gpu else _known(fp.get(name)) for name in STACK_FIELDS},
        "fabric_rate": NOT_APPLICABLE if nodes == 1 else f"{rate:g} Gb/s" if isinstance(rate, (int, float)) and rate > 0
        else UNKNOWN,
    }


def machine_label(key: Key) -> str:
    """The machine of a key in a few words (the `host` axis of compare): CPU, cores, memory, and GPUs."""
    if all(key.get(name, UNKNOWN) in (UNKNOWN, NOT_APPLICABLE) for name in MACHINE_FIELDS):
        return UNKNOWN
    text = f"{key.get('cpu')} {key.get('cores')} {key.get('memory_gib')} GiB"
    if " emulated on " in str(key.get("isa")):  # never mistaken for the machine's own figure
        text += f" [{key['isa']}]"
    if key.get("cpu_id") not in (None, UNKNOWN, NOT_APPLICABLE):  # the marketing name can hide the generation
        text += f" ({key['cpu_id']})"
    if key.get("gpu") not in ("none", NOT_APPLICABLE):
        text += f", {key.get('gpu_count')}x {key.get('gpu')}"
    return text


_NO_BATCH = {"batch_per_device": NOT_APPLICABLE, "global_batch": NOT_APPLICABLE, "data": NOT_APPLICABLE,
             "data_format": NOT_APPLICABLE}


def _where(rec: _Record) -> Key:
    """workload, system, devices, nodes, and the fabric where traffic crosses it."""
    run = rec.run
    devices = _count(run.get("world_size") if run.get("world_size") is not None else rec.result.get("num_devices"))
    if rec.extra.get("dist") == "dataparallel":  # one process per node: the devices are its GPUs
        devices = _count(rec.result.get("num_devices"))
    nodes = _count(run.get("nodes"))
    return {"workload": _known(run.get("workload")), "system": _known(run.get("system")), "devices": devices,
            "partition": _partition(rec.plan), "nodes": nodes,
            "fabric": NOT_APPLICABLE if nodes == 1 else _known(run.get("fabric"))}


def _partition(plan: Mapping[str, Any]) -> str:
    """The partition (queue) the plan's job asked for (an imported log's: the plan `dlrun run` resolves for it); n/a
    where it named none (a local run, a matmul measurement)."""
    options = plan.get("scheduler_options")
    return str(options.get("partition") or NOT_APPLICABLE) if isinstance(options, dict) else NOT_APPLICABLE


def _training(rec: _Record, devices: Any) -> Key:
    run, result, extra = rec.run, rec.result, rec.extra
    per_device = _count(run.get("batch_size") if run.get("batch_size") is not None else result.get("batch_size"))
    if rec.imported and result.get("gpus_per_rank") not in (None, 1):
        per_device = UNKNOWN  # a per-rank batch over several GPUs per rank: per device is not stated
    total = extra.get("global_batch_size") or rec.plan.get("global_batch_size")
    if not total and isinstance(per_device, int) and isinstance(devices, int):
        total = per_device * devices
    data, data_format = data_fields(rec.imported, rec.fmt, rec.workload, extra, rec.plan, rec.image)
    return {"model": _model(rec),
            "precision": _training_precision(run.get("precision"), extra.get("amp_dtype")),
            "batch_per_device": per_device, "global_batch": _count(total), "data": data, "data_format": data_format,
            "framework": _training_framework(rec)}


def _training_framework(rec: _Record) -> str:
    framework = _known(rec.extra.get("framework") or rec.image.get("framework")
                       or _FRAMEWORK_OF_FORMAT.get(rec.fmt or ""))
    benchmark = key_part(rec.plan, rec.image)
    if benchmark is not None:
        framework = f"{framework}/{benchmark}"
    # Horovod averages gradients its own way: not DDP's like-for-like (the TensorFlow 2 harness has only
    # Horovod to run several processes, so its key stays the same across rank counts)
    if rec.extra.get("dist") in ("horovod", "fsdp", "dataparallel") and framework == "pytorch":
        framework = f"{framework}/{rec.extra['dist']}"
    pinned = _pinned_knobs(rec.plan)
    return f"{framework} pinned: {pinned}" if pinned else framework


def _pinned_knobs(plan: Mapping[str, Any]) -> str:
    """The placement knobs the user gave (`--allocator jemalloc`, `--threads 4`), as `name=value` words: they
    place the same computation, so a tuned or default one stays out of the key (the tuner picks what is
    fastest on each machine); a pinned one is the user's choice of what to compare. The knobs that change the
    computation are the key's code path, however they were chosen."""
    sources = _mapping(plan.get("knob_sources"))
    field = {"threads": "threads_per_rank"}
    moving = {name for name, _ in CODE_PATH_KNOBS}
    return " ".join(f"{name}={plan.get(field.get(name, name))}" for name, source in sorted(sources.items())
                    if source == "asked for" and name not in moving)


def _model(rec: _Record) -> str:
    """The model; an LLM's with its sequence length and activation checkpointing (both decide a step's cost)."""
    model, seq = _known(rec.run.get("model") or rec.result.get("model")), rec.extra.get("seq_length")
    if rec.workload.get("kind") != "llm-pretraining" or model == UNKNOWN:
        return model
    checkpointing = rec.extra.get("activation_checkpointing", rec.plan.get("activation_checkpointing"))
    return f"{model} seq={seq or UNKNOWN}" + (" activation-checkpointing" if checkpointing else "")


def _communication(rec: _Record) -> Key:
    result, extra, plan = rec.result, rec.extra, rec.plan
    model = _known(result.get("collective") or plan.get("collective")
                   or ("all_reduce" if extra.get("benchmark") == "allreduce" else None))
    sizes = result.get("sizes") or []
    dtype = extra.get("dtype") or (sizes[0].get("type") if sizes and isinstance(sizes[0], dict) else None)
    backend = extra.get("backend")
    framework = extra.get("framework") or rec.image.get("framework")
    # a dlrun run of the image's nccl-tests is nccl-tests, as an imported nccl-tests log is
    framework = (f"{framework}/{backend}" if framework and backend
                 else _known(_FRAMEWORK_OF_FORMAT.get(rec.fmt or result.get("kind") or "")))
    return {"model": model, "precision": _known(_DTYPES.get(dtype, dtype)), "framework": framework, **_NO_BATCH}


def _command(rec: _Record, devices: Any) -> Key:
    """A site's own command: its hash (text and named files) is the model; batch, precision, data its plan's."""
    digest = str((rec.run.get("provenance") or {}).get("command_sha256") or "")
    per_device, data = _count(rec.run.get("batch_size")), rec.plan.get("data")
    total = per_device * devices if isinstance(per_device, int) and isinstance(devices, int) else UNKNOWN
    return {"model": f"command {digest.split(':')[-1][:16]}" if digest else UNKNOWN,
            "precision": _known(rec.run.get("precision")), "batch_per_device": per_device, "global_batch": total,
            "data": f"path:{data['path']}" if isinstance(data, dict) and data.get("path") else NOT_APPLICABLE,
            "data_format": NOT_APPLICABLE, "framework": "command"}


def _storage(rec: _Record) -> Key:
    """A storage run: what it read (sequential or small files), where (the --data path and its file system
    type), and how (the reader and its page-cache handling, which decide the number as much as the disk)."""
    extra, data = rec.extra, rec.plan.get("data")
    return {"model": _known(extra.get("test")), "precision": NOT_APPLICABLE,
            "batch_per_device": NOT_APPLICABLE, "global_batch": NOT_APPLICABLE,
            "data": f"path:{data['path']}" if isinstance(data, dict) and data.get("path") else UNKNOWN,
            "data_format": f"fs:{_known(extra.get('fs_type'))}",
            "framework": f"storage/{_known(extra.get('reader'))} {_known(extra.get('cache'))}"}


def _training_precision(precision: Any, amp_dtype: Any) -> str:
    return precision_label(str(precision), amp_dtype) if precision else UNKNOWN


def key_json(key: Key) -> str:
    """The canonical text of a key (sorted fields, no spaces): what is stored and hashed."""
    return json.dumps(key, sort_keys=True, separators=(",", ":"))


def key_hash(key: Key) -> str:
    """A stable 16-hex-digit hash of the key: equal keys, equal hashes (across sites and versions)."""
    return hashlib.sha256(key_json(key).encode()).hexdigest()[:16]
