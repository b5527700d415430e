"""The dlrun plan an imported log stands for (`dlrun results import-log FILE --workload W --image I ...`).

A log imported with a workload is stored in the shape of a dlrun run of that workload: the same columns and
the same plan, resolved by `dlrun.plan.resolve_plan` as `dlrun run` resolves its options (the same checks,
the same one-line errors, exit 2). It then gets the comparability key such a run gets, and is compared with
dlrun's runs, with published numbers and, tagged with an experiment, counted for the experiment's point.

The plan is built from what the log says (devices, hosts, batch, precision, tf_cnn_benchmarks' variable
update and tensor layout) and what the options add; where both say something, they must agree. What
neither says and the key depends on is refused, not taken from dlrun's defaults: a default would be a claim
about a run dlrun did not see. Fields the key does not hold (steps, threads, scheduler) keep the plan's
defaults, and the provenance lists which fields came from where.

Logs of benchmark code dlrun does not run itself (DeepLearningExamples, Horovod's synthetic benchmarks,
MLPerf) name that code in the key's framework (`pytorch/deeplearningexamples`): they are compared with each
other and with published numbers for that code, never with dlrun's harness on the same image, whose code
is different ("the same A100 running ResNet-50 1.56x slower in one vendor's harness than in another's").
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from dlrun.catalog import Catalog
from dlrun.catalog.models import ImageSpec, WorkloadSpec
from dlrun.errors import UsageError, unknown_name
from dlrun.plan import LocalImage, Plan, resolve_plan
from dlrun.results.parsers import ParsedResult
from dlrun.runoptions import PRECISIONS
from dlrun.tfcnn.knobs import PS_MODES

#: The code behind logs dlrun does not produce itself, as the key's framework names it after the image's.
FOREIGN_CODE = {"dllogger": "deeplearningexamples", "horovod": "horovod-synthetic-benchmark", "mllog": "mlperf",
                "torchtitan": "torchtitan", "megatron-lm": "megatron-lm", "nemo": "nemo"}
#: Plan fields the comparability key depends on; the provenance says where each came from.
KEY_PLAN_FIELDS = ("workload", "image", "system", "nodes", "ranks_per_node", "batch_size", "precision", "fabric")


@dataclass(frozen=True)
class ImportOptions:
    """What `import-log` is told about the log beyond what it prints (None: not given)."""

    workload: str | None = None
    model: str | None = None
    image: str | None = None
    precision: str | None = None
    fabric: str | None = None
    batch_size: int | None = None
    nodes: int | None = None
    ranks_per_node: int | None = None

    def given(self) -> list[str]:
        """The options given, as the command line spells them."""
        return ["--" + name.replace("_", "-") for name, value in asdict(self).items() if value is not None]


@dataclass(frozen=True)
class ImportPlan:
    plan: Plan
    sources: dict[str, str]  # plan field -> "log", "option", "log and option" or "dlrun default"


def resolve_import_plan(catalog: Catalog, parsed: ParsedResult, *, system: str, options: ImportOptions,
                        local_image: LocalImage | None = None) -> ImportPlan:
    """The plan of a dlrun run of what `parsed` measured, or a UsageError naming what does not fit."""
    _check_options(options)
    work = choose_workload(catalog, parsed, options)
    image = _image(catalog, parsed, work, options)
    spec = catalog.system(system)
    sources: dict[str, str] = {"workload": "option", "image": "option", "system": "option"}
    nodes, ranks_per_node = _layout(parsed, options, spec.name, sources)
    batch = _agreed("--batch-size", options.batch_size, parsed.batch_size if work.trains else None,
                    "batch per device", sources, "batch_size", required=work.trains)
    precision = _agreed("--precision", options.precision, _log_precision(parsed) if work.trains else None,
                        "precision", sources, "precision", required=work.trains) or "fp32"
    if nodes > 1 and options.fabric is None:
        raise UsageError(f"the log ran on {nodes} nodes, whose traffic crossed a fabric it does not name; valid: "
                         f"--fabric {' or --fabric '.join(spec.fabrics)} (the fabrics of system {spec.name!r})")
    sources["fabric"] = "option" if options.fabric else "dlrun default (one node: not in the key)"
    plan = resolve_plan(catalog, work.name, image=image.name, system=spec.name, nodes=nodes,
                        ranks_per_node=ranks_per_node, batch_size=batch, precision=precision, fabric=options.fabric,
                        dist=_dist(parsed, image), local_image=local_image, **_tf_options(parsed, nodes))
    return ImportPlan(plan, sources)


def _check_options(options: ImportOptions) -> None:
    """The option values `dlrun run` would refuse, refused the same way before anything is compared."""
    if options.precision is not None and options.precision not in PRECISIONS:
        raise unknown_name("--precision", options.precision, PRECISIONS)
    for option, value in (("--batch-size", options.batch_size), ("--nodes", options.nodes),
                          ("--ranks-per-node", options.ranks_per_node)):
        if value is not None and value <= 0:
            raise UsageError(f"{option} must be a positive integer, got {value}")


def choose_workload(catalog: Catalog, parsed: ParsedResult, options: ImportOptions) -> WorkloadSpec:
    """--workload, else the one workload whose model is --model; checked against what the log measured."""
    if options.workload is not None:
        work = catalog.workload(options.workload)
        if options.model is not None and options.model not in (work.model, work.tf_cnn_model):
            named = sorted(w.name for w in catalog.workloads.values() if options.model in (w.model, w.tf_cnn_model))
            raise UsageError(f"--model {options.model} is not what workload {work.name!r} trains ("
                             f"{work.model or work.label}); valid: --model {work.model or work.label}"
                             + (f", or --workload {' or --workload '.join(named)}" if named else ""))
    elif options.model is not None:
        named = sorted(w.name for w in catalog.workloads.values() if options.model in (w.model, w.tf_cnn_model))
        if len(named) != 1:
            models = sorted({w.model for w in catalog.workloads.values() if w.model})
            raise UsageError(f"--model {options.model} is trained by " + (
                f"workloads {', '.join(named)}; valid: --workload {' or --workload '.join(named)}" if named
                else f"no workload; valid models: {', '.join(models)}"))
        work = catalog.workload(named[0])
    else:
        given = options.given()
        raise UsageError(f"{', '.join(given)} {'says' if len(given) == 1 else 'say'} how the log's run was made, as "
                         "a run of a dlrun workload; name the workload with --workload NAME or --model NAME (see "
                         "dlrun workloads list)")
    _check_measures(catalog, parsed, work)
    return work


def _check_measures(catalog: Catalog, parsed: ParsedResult, work: WorkloadSpec) -> None:
    """The workload measures what the log measured, and the model the log names (in dlrun's naming) is its."""
    fits, what = _workloads_measuring(catalog, parsed)
    if work.name not in fits:
        raise UsageError(f"workload {work.name!r} ({work.kind}: {work.measures if not work.trains else work.model}) "
                         f"is not what the log measured, {what}; valid: "
                         + (", ".join(sorted(fits)) or "no workload of this catalog"))
    model, naming = _log_model(parsed)
    if model is not None and model not in (work.model, work.tf_cnn_model):
        named = sorted(w.name for w in catalog.workloads.values() if model in (w.model, w.tf_cnn_model))
        raise UsageError(f"the log trained {model} ({naming}), but workload {work.name!r} trains "
                         f"{work.tf_cnn_model if parsed.kind == 'tf_cnn_benchmarks' else work.model}; valid: "
                         + (f"--workload {' or --workload '.join(named)}" if named else "no workload of this catalog"))


def _workloads_measuring(catalog: Catalog, parsed: ParsedResult) -> tuple[list[str], str]:
    """The catalog's workloads that measure what the log measured, and that thing in words."""
    workloads = catalog.workloads.values()
    if parsed.metric == "busbw" and parsed.kind == "nccl-tests":
        return ([w.name for w in workloads if w.nccl_test == f"{parsed.collective}_perf"],
                f"nccl-tests' {parsed.collective or 'unnamed collective'}")
    if parsed.metric == "busbw":
        benchmark = parsed.extra.get("benchmark")
        return ([w.name for w in workloads if not w.trains and w.kind == benchmark],
                f"dlrun's {benchmark or 'unnamed collective'}")
    return [w.name for w in workloads if w.trains], f"a training throughput ({parsed.kind})"


def _log_model(parsed: ParsedResult) -> tuple[str | None, str]:
    """The model the log names, where it uses dlrun's names (tf_cnn_benchmarks' and dlrun's harness)."""
    if parsed.kind == "tf_cnn_benchmarks":
        return parsed.model, "tf_cnn_benchmarks' name"
    if parsed.kind == "dlrun-harness" and parsed.metric == "throughput":
        return parsed.model, "dlrun's harness"
    return None, ""


def _image(catalog: Catalog, parsed: ParsedResult, work: WorkloadSpec, options: ImportOptions) -> ImageSpec:
    """--image, which must run the code that printed the log (plan resolution checks the rest)."""
    if options.image is None:
        raise UsageError("the log does not say which image it ran in; valid: --image NAME (see dlrun images list; "
                         "a site's own image goes into its images/ catalog directory)")
    image = catalog.image(options.image)
    runs_tf_cnn = image.framework == "tensorflow" and image.harness_framework is None
    if parsed.kind == "tf_cnn_benchmarks" and not runs_tf_cnn:
        valid = sorted(n for n, i in catalog.images.items() if i.framework == "tensorflow" and i.harness_framework is None)
        raise UsageError(f"the log is tf_cnn_benchmarks output, but image {image.name!r} runs dlrun's harness; valid: "
                         f"--image {' or --image '.join(valid)}")
    if parsed.kind != "tf_cnn_benchmarks" and runs_tf_cnn and work.trains:
        raise UsageError(f"the log is {parsed.kind} output, but image {image.name!r} runs tf_cnn_benchmarks; valid: "
                         "an image that ran the log's own code (a site's own image in its images/ directory)")
    logged, pinned = _log_framework_version(parsed), image.framework_version
    if logged and pinned and not _same_version(logged, pinned):
        raise UsageError(f"the log ran {image.framework} {logged}, but image {image.name!r} pins {pinned}; valid: "
                         "an image of that version (a site's own image goes into its images/ catalog directory)")
    return image


def _log_framework_version(parsed: ParsedResult) -> str | None:
    value = parsed.extra.get("tensorflow") if parsed.kind == "tf_cnn_benchmarks" else (
        parsed.extra.get("framework_version") if parsed.kind == "dlrun-harness" else None)
    return value if isinstance(value, str) and value else None


def _same_version(logged: str, pinned: str) -> bool:
    """`1.14` and `1.14.0`, `2.6.0a0+df5bb` and `2.6.0a0` are the same; `1.15` and `1.14.0` are not."""
    a, b = logged.split("+")[0].split("."), pinned.split("+")[0].split(".")
    return a[:len(b)] == b[:len(a)]


def _layout(parsed: ParsedResult, options: ImportOptions, system: str, sources: dict[str, str]) -> tuple[int, int]:
    """(nodes, ranks per node): the log's device count over its hosts, or the options where the log is silent."""
    devices, hosts = parsed.num_devices, len(parsed.hosts) or None
    if options.nodes is not None and hosts is not None and options.nodes != hosts:
        raise UsageError(f"--nodes {options.nodes} disagrees with the log, whose ranks ran on {hosts} host(s) "
                         f"({', '.join(parsed.hosts)}); valid: --nodes {hosts}, or leave it out")
    if devices is None:
        if (options.nodes or hosts) is None or options.ranks_per_node is None:
            raise UsageError("the log does not say how many devices ran; valid: --nodes N --ranks-per-node M")
        sources["nodes"] = sources["ranks_per_node"] = "option"
        return options.nodes or hosts, options.ranks_per_node
    nodes = _nodes(devices, options.nodes or hosts, options.ranks_per_node)
    if options.ranks_per_node is not None and options.ranks_per_node != devices // nodes:
        raise UsageError(f"--ranks-per-node {options.ranks_per_node} disagrees with the log: {devices} devices on "
                         f"{nodes} node(s) are {devices // nodes} per node; valid: --ranks-per-node {devices // nodes}")
    sources["nodes"] = "log" if hosts is not None or (devices == 1 and options.nodes is None) else "option"
    sources["ranks_per_node"] = "log" if sources["nodes"] == "log" else "log and option"
    return nodes, devices // nodes


def _nodes(devices: int, nodes: int | None, ranks_per_node: int | None) -> int:
    """The nodes the log's devices sat on: given (log or option), from --ranks-per-node, or 1 for one device."""
    if nodes is None and ranks_per_node:
        if devices % ranks_per_node:
            raise UsageError(f"--ranks-per-node {ranks_per_node} does not divide the log's {devices} devices; valid: "
                             f"a divisor of {devices}")
        nodes = devices // ranks_per_node
    if nodes is None:
        if devices > 1:
            raise UsageError(f"the log does not say how many nodes its {devices} devices sat on; valid: --nodes N with "
                             f"N dividing {devices} (or --ranks-per-node M)")
        nodes = 1
    if devices % nodes:
        raise UsageError(f"--nodes {nodes} does not divide the log's {devices} devices; valid: a divisor of {devices}")
    return nodes


def _agreed(option: str, given: Any, logged: Any, what: str, sources: dict[str, str], field: str, *,
            required: bool) -> Any:
    """The value the option and the log agree on; either alone; refused when they differ, or when neither
    says it and the key needs it."""
    if given is not None and logged is not None and given != logged:
        raise UsageError(f"{option} {given} disagrees with the log, whose {what} is {logged}; valid: {option} "
                         f"{logged}, or leave it out")
    if given is None and logged is None:
        if required:
            raise UsageError(f"the log does not say its {what}; valid: {option} "
                             + ("fp32 or amp" if option == "--precision" else "N"))
        return None
    sources[field] = "log and option" if given is not None and logged is not None else (
        "option" if given is not None else "log")
    return given if given is not None else logged


def _log_precision(parsed: ParsedResult) -> str | None:
    precision = parsed.extra.get("precision")
    if precision is None or precision in PRECISIONS:
        return precision
    raise UsageError(f"the log trained in {str(precision)[:20]}, which is none of dlrun's precisions; valid: a log "
                     f"in {', '.join(PRECISIONS)}, or an import without --workload")


def _dist(parsed: ParsedResult, image: ImageSpec) -> str | None:
    """How a PyTorch log's ranks were distributed, where the log tells (None: not a PyTorch image's plan)."""
    if image.framework != "pytorch":
        return None
    if parsed.kind == "horovod":
        return "horovod"
    if parsed.kind == "dllogger":
        return "ddp"  # DeepLearningExamples' PyTorch models train with DistributedDataParallel
    dist = parsed.extra.get("dist") if parsed.kind == "dlrun-harness" else None
    return dist if dist in ("ddp", "horovod") else None


def _tf_options(parsed: ParsedResult, nodes: int) -> dict[str, Any]:
    """tf_cnn_benchmarks' variable update, all-reduce spec and tensor layout, from the log's header."""
    if parsed.kind != "tf_cnn_benchmarks":
        return {}
    variables, layout = parsed.extra.get("variables"), parsed.extra.get("data_format")
    if not variables or not layout:
        raise UsageError("the log does not show tf_cnn_benchmarks' header (Variables:, Data format:), so it does "
                         "not say how gradients were combined or in which tensor layout; valid: a log with its "
                         "header, or an import without --workload")
    if variables in PS_MODES and nodes > 1:
        raise UsageError(f"the log trained with parameter servers ({variables}) on {nodes} nodes and does not say "
                         "how many servers ran; valid: a log of one node, or an import without --workload")
    spec = parsed.extra.get("all_reduce_spec")
    return {"variable_update": variables, "data_format": layout,
            "all_reduce_spec": spec if spec and spec != "None" else None}
