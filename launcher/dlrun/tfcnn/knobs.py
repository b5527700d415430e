"""tf_cnn_benchmarks' own knobs as plan data: how variables are updated (parameter servers, all-reduce, Horovod),
the all-reduce algorithm, the parameter-server count, the tensor layout and pass-through flags, checked against
what the image's tf_cnn_benchmarks accepts and what dlrun can start; and what of them a stored run's
comparability key carries (`key_part`).

Flag names and values are tf_cnn_benchmarks' (benchmark_cnn.py and allreduce.py of the `cnn_tf_v1.N_compatible`
branch the image pins): `--variable_update` gained `collective_all_reduce` and `--all_reduce_spec` the
`collective` algorithm in the v1.9 branch.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from dlrun.errors import UsageError, closest, unknown_name

#: --variable_update values of tf_cnn_benchmarks' v1.8 branch; v1.9 and later add collective_all_reduce.
VARIABLE_UPDATES_1_8 = ("parameter_server", "replicated", "distributed_replicated", "independent",
                        "distributed_all_reduce", "horovod")
COLLECTIVE_SINCE = (1, 9)
#: Algorithms of --all_reduce_spec (allreduce.parse_all_reduce_spec); `collective` since v1.9.
ALL_REDUCE_ALGS_1_8 = ("nccl", "nccl/xring", "nccl/rechd", "nccl/pscpu", "xring", "pscpu", "psgpu", "pscpu/pscpu")
#: Modes whose processes form a TensorFlow cluster (--job_name, --worker_hosts, --task_index).
PS_MODES = ("parameter_server", "distributed_replicated")
CLUSTER_MODES = (*PS_MODES, "collective_all_reduce")
#: Modes that run in one process on one node (tf_cnn_benchmarks' local training).
LOCAL_MODES = ("parameter_server", "replicated", "independent")
#: Modes that read --all_reduce_spec.
SPEC_MODES = ("replicated", "collective_all_reduce", "distributed_all_reduce")
DATA_FORMATS = ("NCHW", "NHWC")
#: Flags dlrun writes itself, and the dlrun option that sets each (a --benchmark-arg may not repeat them).
OWN_FLAGS = {
    "model": "the workload", "batch_size": "--batch-size", "num_batches": "--steps",
    "num_warmup_batches": "--warmup-steps", "device": "the system's GPUs", "num_gpus": "--ranks-per-node",
    "data_format": "--data-format", "variable_update": "--variable-update", "all_reduce_spec": "--all-reduce-spec",
    "use_fp16": "--precision amp", "data_dir": "--data", "data_name": "--data", "job_name": "--ps",
    "task_index": "--ps", "ps_hosts": "--ps", "worker_hosts": "--ps", "horovod_device": "--variable-update",
    "num_intra_threads": "--threads", "local_parameter_device": "--variable-update",
    "server_protocol": "--variable-update",
}
FLAG = re.compile(r"--([A-Za-z][A-Za-z0-9_]*)(=.*)?", re.DOTALL)


def version_tuple(text: str | None) -> tuple[int, int] | None:
    match = re.match(r"(\d+)\.(\d+)", text or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def variable_updates(framework_version: str | None) -> tuple[str, ...]:
    version = version_tuple(framework_version)
    newer = version is None or version >= COLLECTIVE_SINCE
    return VARIABLE_UPDATES_1_8 + (("collective_all_reduce",) if newer else ())


def all_reduce_algs(framework_version: str | None) -> tuple[str, ...]:
    version = version_tuple(framework_version)
    return ALL_REDUCE_ALGS_1_8 + (("collective",) if version is None or version >= COLLECTIVE_SINCE else ())


def horovod_absent(image: Any) -> str | None:
    """Why the image has no Horovod (its `horovod: {not_used: ...}`), or None when it has (or may have) it."""
    return getattr(getattr(image, "horovod", None), "not_used", None)


def check_all_reduce_spec(spec: str, algs: tuple[str, ...]) -> None:
    """tf_cnn_benchmarks' grammar: `alg[#shards][/alg[#shards]]` ranges joined by `:LIMIT[KkMGT]:`."""
    valid = f"valid: ALG[#N] or ALG[#N]:LIMIT:ALG[#N] with ALG one of {', '.join(algs)} (e.g. xring, pscpu:32k:xring)"
    parts = spec.split(":")
    if not spec or len(parts) % 2 == 0:
        raise UsageError(f"bad --all-reduce-spec {spec!r}; {valid}")
    for index, part in enumerate(parts):
        if index % 2:
            if not re.fullmatch(r"[0-9]+[KkMGT]?", part):
                raise UsageError(f"bad --all-reduce-spec {spec!r}: limit {part!r} is no size; {valid}")
            continue
        alg, _, shards = part.partition("#")
        if alg not in algs:
            hint = closest(alg, algs)
            raise UsageError(f"bad --all-reduce-spec {spec!r}: unknown algorithm {alg!r}"
                             + (f"; did you mean {hint!r}?" if hint else "") + f"; {valid}")
        if "#" in part and not shards.isdigit():
            raise UsageError(f"bad --all-reduce-spec {spec!r}: shards {shards!r} is no count; {valid}")


def check_benchmark_arg(arg: str) -> None:
    match = FLAG.fullmatch(arg)
    if not match:
        raise UsageError(f"bad --benchmark-arg {arg!r}; valid: --FLAG or --FLAG=VALUE (a tf_cnn_benchmarks flag)")
    name = match.group(1)
    if name in OWN_FLAGS:
        raise UsageError(f"--benchmark-arg {arg!r} sets --{name}, which dlrun writes itself; "
                         f"valid: {OWN_FLAGS[name]}")


def resolve_tf_options(image: Any, *, nodes: int, world: int, device: str, variable_update: str | None,
                       all_reduce_spec: str | None, ps: int | None, data_format: str | None,
                       benchmark_args: list[str] | None) -> dict[str, Any]:
    """The plan fields for tf_cnn_benchmarks (all empty for dlrun's PyTorch harness, which takes none)."""
    given = [name for name, value in (("--variable-update", variable_update), ("--all-reduce-spec", all_reduce_spec),
                                      ("--ps", ps), ("--data-format", data_format),
                                      ("--benchmark-arg", benchmark_args)) if value]
    harness = getattr(image, "harness_framework", image.framework)
    if image.framework != "tensorflow" or harness is not None:
        if given:
            raise UsageError(f"{given[0]} is a tf_cnn_benchmarks option, but image {image.name!r} runs dlrun's "
                             f"{harness or image.framework} harness; valid: an image that runs TensorFlow (e.g. --image "
                             "tf1.14-nccl), or leave it out")
        return {}
    mode = _mode(image, variable_update, nodes=nodes, world=world, ps=ps)
    towers = world if device == "cuda" else nodes  # one per GPU; one CPU device per node's process
    if mode == "collective_all_reduce" and towers < 2:
        raise UsageError(f"--variable-update collective_all_reduce reduces between devices, and the plan has "
                         f"{towers}; valid: 2 or more GPUs in all, or --nodes 2 or more on CPUs")
    cluster = mode in CLUSTER_MODES and (mode != "parameter_server" or nodes > 1 or bool(ps))
    _check_ps(ps, mode, nodes)
    for arg in benchmark_args or []:
        check_benchmark_arg(arg)
    return {"variable_update": mode,
            "all_reduce_spec": _spec(mode, all_reduce_spec, image.framework_version, cluster and nodes > 1),
            "parameter_servers": (ps or 1) if cluster and mode in PS_MODES else 0,
            "data_format": _layout(data_format, device), "benchmark_args": list(benchmark_args or [])}


def _mode(image: Any, variable_update: str | None, *, nodes: int, world: int, ps: int | None) -> str:
    """--variable-update (one the image's tf_cnn_benchmarks knows and dlrun can start), else the default."""
    no_horovod = horovod_absent(image)
    modes = variable_updates(image.framework_version)
    runnable = [m for m in modes if m != "distributed_all_reduce" and not (m == "horovod" and no_horovod)]
    if variable_update is not None and variable_update not in modes:
        hint = closest(variable_update, modes)
        raise UsageError(f"unknown --variable-update {variable_update!r}"
                         + (f"; did you mean {hint!r}?" if hint else ";") + " valid for image "
                         f"{image.name!r} (tf_cnn_benchmarks of TensorFlow {image.framework_version}): "
                         + ", ".join(runnable))
    if variable_update == "horovod" and no_horovod:
        raise UsageError(f"--variable-update horovod needs Horovod, which image {image.name!r} does not have "
                         f"({no_horovod}); valid: {', '.join(runnable)}")
    if variable_update == "distributed_all_reduce":
        raise UsageError("--variable-update distributed_all_reduce drives every worker from a controller process, "
                         "which dlrun does not start; valid: collective_all_reduce, horovod or parameter_server")
    mode = variable_update or _default_mode(world, ps, no_horovod)
    if nodes > 1 and mode in ("replicated", "independent"):
        raise UsageError(f"--variable-update {mode} trains in one process on one node, but the plan has {nodes} "
                         f"nodes; valid: --nodes 1, or --variable-update "
                         f"{', '.join(m for m in modes if m in CLUSTER_MODES or (m == 'horovod' and not no_horovod))}")
    return mode


def _check_ps(ps: int | None, mode: str, nodes: int) -> None:
    if ps is None:
        return
    if mode not in PS_MODES:
        raise UsageError(f"--ps {ps}: --variable-update {mode} starts no parameter servers; valid: "
                         "--variable-update parameter_server or distributed_replicated, or leave --ps out")
    if ps <= 0 or (ps > nodes and ps % nodes):
        raise UsageError(f"--ps {ps}: parameter servers share the {nodes} node(s) evenly; valid: 1..{nodes} "
                         f"or a multiple of {nodes}")


def _layout(data_format: str | None, device: str) -> str:
    layout = (data_format or ("NCHW" if device == "cuda" else "NHWC")).upper()
    if layout not in DATA_FORMATS:
        raise unknown_name("--data-format", layout, DATA_FORMATS)
    if layout == "NCHW" and device != "cuda":
        raise UsageError("--data-format NCHW is cuDNN's layout and needs a GPU, but the plan runs on CPUs; "
                         "valid: NHWC")
    return layout


def _default_mode(world: int, ps: int | None, no_horovod: str | None) -> str:
    """Horovod where the image has it and there is more than one rank (Samsi et al.), parameter servers
    where it has not (Han et al.'s native distributed TensorFlow; on one node tf_cnn_benchmarks' local
    parameter_server, GPU0 gathering the node's gradients as Han et al. describe), one process for one rank."""
    if ps:
        return "parameter_server"
    if world == 1:
        return "replicated"
    return "parameter_server" if no_horovod else "horovod"


def _spec(mode: str, spec: str | None, version: str | None, multi_worker: bool) -> str | None:
    if spec is None:
        return "collective" if mode == "collective_all_reduce" else None  # tf_cnn_benchmarks requires one
    if mode not in SPEC_MODES:
        raise UsageError(f"--all-reduce-spec {spec!r}: --variable-update {mode} does not read it; valid: "
                         "--variable-update replicated or collective_all_reduce, or leave --all-reduce-spec out")
    check_all_reduce_spec(spec, all_reduce_algs(version))
    if mode == "collective_all_reduce" and not re.fullmatch(r"collective(#[0-9]+)?", spec):
        raise UsageError(f"--all-reduce-spec {spec!r}: collective_all_reduce takes one collective range; "
                         "valid: collective or collective#N (N concurrent transfers)")
    if multi_worker and spec == "nccl":
        raise UsageError("--all-reduce-spec nccl reduces within one worker only, but the plan has several; "
                         "valid: nccl/xring, xring, pscpu, collective")
    return spec


def key_part(plan: Mapping[str, Any], image: Mapping[str, Any]) -> str | None:
    """What decides a tf_cnn_benchmarks run's value beyond the other fields of the comparability key
    (dlrun.results.key), from a stored run's plan and image."""
    if image.get("framework") != "tensorflow" or not plan.get("variable_update"):
        return None  # not tf_cnn_benchmarks, an imported log, or a run recorded before dlrun stored them
    parts = [str(plan["variable_update"])]
    if plan.get("all_reduce_spec"):
        parts.append(f"all_reduce_spec={plan['all_reduce_spec']}")
    if plan.get("parameter_servers"):
        parts.append(f"ps={plan['parameter_servers']}")
    parts.append(f"layout={plan.get('data_format')}")  # tensor layout, not the on-disk data format
    return " ".join(parts + [str(arg) for arg in plan.get("benchmark_args") or []])
