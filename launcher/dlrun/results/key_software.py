"""Parts of the comparability key (dlrun.results.key) read from what a run ran: the data it read, its framework's
version, its image's identity; and the two values a field takes where the record cannot tell or the field does not
apply."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

UNKNOWN = "unknown"
NOT_APPLICABLE = "n/a"


def _known(value: Any) -> Any:
    return UNKNOWN if value is None or value == "" else value


def data_fields(imported: bool, fmt: str | None, workload: Mapping[str, Any], extra: Mapping[str, Any],
          plan: Mapping[str, Any], image: Mapping[str, Any]) -> tuple[str, str]:
    binds = plan.get("binds") if isinstance(plan.get("binds"), list) else []
    # --data: the plan's `data` field; plans stored before it had one bind the dataset at /data instead
    has_data = isinstance(plan.get("data"), dict) or any(isinstance(b, dict) and b.get("target") == "/data"
                                                          for b in binds)
    if image.get("framework") == "tensorflow" and has_data:
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


def framework_version(kind: str, fmt: str | None, result: Mapping[str, Any], extra: Mapping[str, Any],
                       image: Mapping[str, Any]) -> str:
    if kind == "matmul":
        return _known(result.get("framework_version"))
    if kind == "command":  # the command's software is its hash (the model field) and the image's digest
        return NOT_APPLICABLE
    if kind == "storage":  # fio's version where fio read; the harness's reader is in the image digest
        fio = extra.get("fio") if isinstance(extra.get("fio"), dict) else {}
        return f"fio {fio['fio_version']}" if fio.get("fio_version") else NOT_APPLICABLE
    version = extra.get("framework_version") or image.get("framework_version")
    if fmt == "tf_cnn_benchmarks":
        version = extra.get("tensorflow")
    elif fmt == "nccl-tests" or result.get("kind") == "nccl-tests":
        version = extra.get("nccl_version")
    elif kind == "communication" and version and extra.get("nccl_version"):
        version = f"{version}+nccl{extra['nccl_version']}"
    return _known(version)


def image_identity(run: Mapping[str, Any], image: Mapping[str, Any], provenance: Mapping[str, Any]) -> str:
    if run.get("image_digest"):
        return str(run["image_digest"])
    if image.get("kind") == "host" and provenance.get("harness_sha256"):
        return "host:harness-" + str(provenance["harness_sha256"]).split(":")[-1][:16]
    return UNKNOWN
