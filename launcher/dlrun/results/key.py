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
  data               synthetic, or real:<dataset>; data_format: the on-disk format of real data
  framework          pytorch, tensorflow, pytorch/horovod (the harness with --dist horovod); for collectives
                     the library and backend (pytorch/gloo, nccl-tests)
  framework_version  the version the run reported (else the image's pinned one), +horovod<version> with Horovod
  image_digest       the image's content digest; for the `host` image (no container) the sha256 of the
                     harness file stands in (`host:harness-<16 hex digits>`), next to the framework version
  devices, nodes     devices that did the work, and the nodes they sat on
  system             the system profile
  fabric             the inter-node fabric; `n/a` on one node, where no traffic crosses it

A tf_cnn_benchmarks run's framework carries the settings that decide its value after a slash, as a collective's
carries its backend: `tensorflow/parameter_server ps=4 layout=NCHW` (variable update, all-reduce spec,
parameter servers, tensor layout, pass-through flags; see dlrun.tfoptions).
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

UNKNOWN = "unknown"
NOT_APPLICABLE = "n/a"

#: Field -> how it is named in sentences.
KEY_FIELDS: dict[str, str] = {
    "workload": "workload", "model": "model variant", "precision": "precision",
    "batch_per_device": "batch per device", "global_batch": "global batch", "data": "data",
    "data_format": "data format", "framework": "framework", "framework_version": "framework version",
    "image_digest": "image digest", "devices": "devices", "nodes": "nodes", "system": "system",
    "fabric": "fabric",
}

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
    """training | communication | matmul, from the result's metric (else the plan)."""
    metric = result.get("metric")
    plan = run.get("plan") or {}
    workload = plan.get("workload") if isinstance(plan.get("workload"), dict) else {}
    if metric == "matmul" or run.get("workload") == "matmul":
        return "matmul"
    if metric == "busbw" or workload.get("kind") not in (None, "cnn-training", "bert-finetuning") \
            or plan.get("collective"):
        return "communication"
    return "training"


def key_from_run(run: Mapping[str, Any], results: Iterable[Mapping[str, Any]] = ()) -> Key:
    """The key of a stored run: its columns, `plan`, `provenance` and result rows (as `Store.add_run`
    takes them). Works for runs dlrun launched, logs imported from other tools and matmul measurements."""
    results = list(results)
    result = results[0] if results else {}
    extra = result.get("extra") if isinstance(result.get("extra"), dict) else {}
    plan = run.get("plan") or {}
    provenance = run.get("provenance") or {}
    image = plan.get("image") if isinstance(plan.get("image"), dict) else {}
    workload = plan.get("workload") if isinstance(plan.get("workload"), dict) else {}
    kind = run_kind(run, result)
    imported = (run.get("origin") or plan.get("origin") or provenance.get("origin")) == "import-log"
    fmt = plan.get("format") if imported else None

    devices = _count(run.get("world_size") if run.get("world_size") is not None else result.get("num_devices"))
    nodes = _count(run.get("nodes"))
    key: Key = {"workload": _known(run.get("workload")), "system": _known(run.get("system")),
                "devices": devices, "nodes": nodes}
    key["fabric"] = NOT_APPLICABLE if nodes == 1 else _known(run.get("fabric"))

    if kind == "training":
        key["model"] = _known(run.get("model") or result.get("model"))
        key["precision"] = _training_precision(run.get("precision"), extra.get("amp_dtype"))
        per_device = _count(run.get("batch_size") if run.get("batch_size") is not None else result.get("batch_size"))
        if imported and result.get("gpus_per_rank") not in (None, 1):
            per_device = UNKNOWN  # a per-rank batch over several GPUs per rank: per device is not stated
        key["batch_per_device"] = per_device
        total = extra.get("global_batch_size") or plan.get("global_batch_size")
        if not total and isinstance(per_device, int) and isinstance(devices, int):
            total = per_device * devices
        key["global_batch"] = _count(total)
        key["data"], key["data_format"] = _data(imported, fmt, workload, extra, plan, image)
        key["framework"] = _known(extra.get("framework") or image.get("framework")
                                  or _FRAMEWORK_OF_FORMAT.get(fmt or ""))
        benchmark = _tf_benchmark(plan, image)
        if benchmark is not None:
            key["framework"] = f"{key['framework']}/{benchmark}"
        # Horovod averages gradients its own way: not DDP's like-for-like (the TensorFlow 2 harness has only
        # Horovod to run several processes, so its key stays the same across rank counts)
        if extra.get("dist") == "horovod" and key["framework"] == "pytorch":
            key["framework"] = f"{key['framework']}/horovod"
    else:
        key["batch_per_device"] = key["global_batch"] = NOT_APPLICABLE
        key["data"] = key["data_format"] = NOT_APPLICABLE
        if kind == "communication":
            key["model"] = _known(result.get("collective") or plan.get("collective")
                                  or ("all_reduce" if extra.get("benchmark") == "allreduce" else None))
            sizes = result.get("sizes") or []
            dtype = extra.get("dtype") or (sizes[0].get("type") if sizes and isinstance(sizes[0], dict) else None)
            key["precision"] = _known(_DTYPES.get(dtype, dtype))
            backend = extra.get("backend")
            framework = extra.get("framework") or image.get("framework")
            # a dlrun run of the image's nccl-tests is nccl-tests, as an imported nccl-tests log is
            key["framework"] = (f"{framework}/{backend}" if framework and backend
                                else _known(_FRAMEWORK_OF_FORMAT.get(fmt or result.get("kind") or "")))
        else:
            key["model"] = NOT_APPLICABLE
            key["precision"] = _training_precision(run.get("precision"), result.get("dtype"))
            key["framework"] = _known(result.get("framework"))
    key["framework_version"] = _framework_version(kind, fmt, result, extra, image)
    if kind == "training" and extra.get("dist") == "horovod" and extra.get("horovod_version") \
            and key["framework"].startswith("pytorch/"):
        key["framework_version"] = f"{key['framework_version']}+horovod{extra['horovod_version']}"
    key["image_digest"] = _image_identity(run, image, provenance)
    return {name: key[name] for name in KEY_FIELDS}


def _training_precision(precision: Any, amp_dtype: Any) -> str:
    if not precision:
        return UNKNOWN
    if precision == "amp":
        return f"amp({amp_dtype})" if amp_dtype else "amp"
    return str(precision)


def _tf_benchmark(plan: Mapping[str, Any], image: Mapping[str, Any]) -> str | None:
    """What decides a tf_cnn_benchmarks run's value beyond the other fields (see dlrun.tfoptions)."""
    if image.get("framework") != "tensorflow" or not plan.get("variable_update"):
        return None  # not tf_cnn_benchmarks, an imported log, or a run recorded before dlrun stored them
    parts = [str(plan["variable_update"])]
    if plan.get("all_reduce_spec"):
        parts.append(f"all_reduce_spec={plan['all_reduce_spec']}")
    if plan.get("parameter_servers"):
        parts.append(f"ps={plan['parameter_servers']}")
    parts.append(f"layout={plan.get('data_format')}")  # tensor layout, not the on-disk data format
    return " ".join(parts + [str(arg) for arg in plan.get("benchmark_args") or []])


def _data(imported: bool, fmt: str | None, workload: Mapping[str, Any], extra: Mapping[str, Any],
          plan: Mapping[str, Any], image: Mapping[str, Any]) -> tuple[str, str]:
    binds = plan.get("binds") if isinstance(plan.get("binds"), list) else []
    if image.get("framework") == "tensorflow" and any(isinstance(b, dict) and b.get("target") == "/data"
                                                      for b in binds):
        return "real:imagenet", "tfrecord"  # --data: tf_cnn_benchmarks reads it as ImageNet TFRecord files
    if imported:
        # what the log says it read (its parser's data_source); pytorch_synthetic_benchmark (the Horovod
        # example) has no other mode
        source = extra.get("data_source") or ("synthetic" if fmt == "horovod" else None)
        if source in ("jpeg", "tfrecord"):
            return "real:imagenet", str(source)
        return ("synthetic", NOT_APPLICABLE) if source == "synthetic" else (UNKNOWN, UNKNOWN)
    if workload.get("framework") == "tensorflow" and workload.get("dataset") not in (None, "synthetic"):
        return f"real:{workload['dataset']}", "tfrecord"  # tf_cnn_benchmarks reads ImageNet as TFRecord files
    if workload.get("dataset") is None and not extra:
        return UNKNOWN, UNKNOWN
    if extra.get("data_source") in ("jpeg", "tfrecord"):  # dlrun's PyTorch harness with --data DIR
        return "real:imagenet", str(extra["data_source"])
    return "synthetic", NOT_APPLICABLE  # dlrun's PyTorch harness: synthetic unless it says otherwise


def _framework_version(kind: str, fmt: str | None, result: Mapping[str, Any], extra: Mapping[str, Any],
                       image: Mapping[str, Any]) -> str:
    if kind == "matmul":
        return _known(result.get("framework_version"))
    version = extra.get("framework_version") or image.get("framework_version")
    if fmt == "tf_cnn_benchmarks":
        version = extra.get("tensorflow")
    elif fmt == "nccl-tests" or result.get("kind") == "nccl-tests":
        version = extra.get("nccl_version")
    elif kind == "communication" and version and extra.get("nccl_version"):
        version = f"{version}+nccl{extra['nccl_version']}"
    return _known(version)


def _image_identity(run: Mapping[str, Any], image: Mapping[str, Any], provenance: Mapping[str, Any]) -> str:
    if run.get("image_digest"):
        return str(run["image_digest"])
    if image.get("kind") == "host" and provenance.get("harness_sha256"):
        return "host:harness-" + str(provenance["harness_sha256"]).split(":")[-1][:16]
    return UNKNOWN


def key_json(key: Key) -> str:
    """The canonical text of a key (sorted fields, no spaces): what is stored and hashed."""
    return json.dumps(key, sort_keys=True, separators=(",", ":"))


def key_hash(key: Key) -> str:
    """A stable 16-hex-digit hash of the key: equal keys, equal hashes (across sites and versions)."""
    return hashlib.sha256(key_json(key).encode()).hexdigest()[:16]


def has_unknown(key: Key, ignore: Iterable[str] = ()) -> list[str]:
    """Fields of `key` that are unknown, apart from `ignore`."""
    skip = set(ignore)
    return [name for name in KEY_FIELDS if name not in skip and key.get(name) == UNKNOWN]


def differences(a: Key, b: Key, ignore: Iterable[str] = ()) -> list[str]:
    """Why `a` and `b` are not like-for-like, one sentence per field; [] when they are.

    `ignore` names fields allowed to differ (the axis a comparison is made along)."""
    skip = set(ignore)
    out = []
    for name, label in KEY_FIELDS.items():
        if name in skip:
            continue
        va, vb = a.get(name, UNKNOWN), b.get(name, UNKNOWN)
        if va == UNKNOWN and vb == UNKNOWN:
            out.append(f"{label}: unknown on both sides (cannot tell whether they match)")
        elif UNKNOWN in (va, vb):
            out.append(f"{label}: {va} vs {vb} (cannot tell whether they match)")
        elif va != vb:
            out.append(f"{label}: {va} vs {vb}")
    return out


def spread(keys: Iterable[tuple[Key, int]], ignore: Iterable[str] = ()) -> list[str]:
    """Differences within a set of keys, each given with how many runs carry it; [] when like-for-like.

    One sentence per field: "precision: fp32 (3 runs), amp(bfloat16) (2 runs)", or "image digest:
    unknown for 4 runs (cannot tell whether they match)" (an unknown field of even one group of repeats
    is a difference: its runs cannot be shown to match each other)."""
    skip = set(ignore)
    keys = list(keys)
    total = sum(runs for _, runs in keys)
    out = []
    for name, label in KEY_FIELDS.items():
        if name in skip:
            continue
        counts: dict[Any, int] = {}
        for key, runs in keys:
            value = key.get(name, UNKNOWN)
            counts[value] = counts.get(value, 0) + runs
        unknown = counts.pop(UNKNOWN, 0)
        doubt = " (cannot tell whether they match)"
        if counts and (len(counts) > 1 or unknown):
            listed = ", ".join(f"{value} ({_runs(n)})" for value, n in sorted(counts.items(), key=lambda i: str(i[0])))
            out.append(f"{label}: {listed}" + (f", unknown ({_runs(unknown)}){doubt}" if unknown else ""))
        elif unknown and total > 1:  # one run alone matches nothing, so nothing is unknown about a match
            out.append(f"{label}: unknown for {_runs(unknown)}{doubt}")
    return out


def _runs(n: int) -> str:
    return f"{n} run" if n == 1 else f"{n} runs"
