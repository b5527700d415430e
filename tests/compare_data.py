"""Stored runs with chosen values, shaped as `execute/record.py` stores them, for the compare tests."""
from __future__ import annotations

import itertools
from typing import Any

from dlrun.results.store import Store

_ids = itertools.count()
#: The machine the runs were made on unless a test says otherwise: a DGX-2 node as NVIDIA describes it (two
#: Xeon Platinum 8168, 1.5 TB, 16 V100 32 GB), fingerprinted as a job on it reports itself.
DGX2_NODE = {"cpu": "Intel Xeon Platinum 8168", "cpu_id": "GenuineIntel family 6 model 85 stepping 4",
             "isa": "x86-64-v4", "sockets": 2, "cores_per_socket": 24, "memory_gib": 1510,
             "gpu": "Tesla V100-SXM3-32GB", "gpu_count": 16, "gpu_memory_gib": 32, "driver": "535.104.05",
             "device": "cuda", "cuda": "12.2", "cudnn": "8902", "nccl": "2.18.5", "fabric_rate_gbps": 100.0,
             "node_from": "job"}


#: The knobs of a run on PyTorch's own ops (the key's code path `reference`), as the harness records them.
REFERENCE_KNOBS = {name: {"value": "off", "source": "default"}
                   for name in ("fused_optimizer", "fused_bn_relu", "channels_last", "compile")}


def record(value: float, *, workload: str = "resnet50", model: str = "resnet50_v1.5", system: str = "dgx2",
           devices: int = 1, nodes: int = 1, batch: int = 64, precision: str = "fp32", fabric: str = "tcp",
           image: str = "pytorch-2.13", digest: str = "sha256:" + "a" * 64, version: str = "2.13.0",
           site: str = "here", metric: str = "throughput", created: str | None = None,
           machine: dict | None = DGX2_NODE, verdict_inputs: dict | None = None) -> tuple[dict, list]:
    number = next(_ids)
    comm = metric == "busbw"
    run = {"id": f"2026{number:06d}", "created_at": created or f"2026-01-01T00:00:{number % 60:02d}Z",
           "status": "ok", "workload": "allreduce" if comm else workload, "model": None if comm else model,
           "image": image, "image_digest": digest, "system": system, "fabric": fabric, "nodes": nodes,
           "ranks_per_node": devices // nodes, "world_size": devices, "batch_size": None if comm else batch,
           "precision": precision, "site": site, "origin": "local",
           "plan": {"workload": {"name": workload, "kind": "allreduce" if comm else "cnn-training",
                                 "framework": "pytorch", "dataset": "synthetic", "model": model},
                    "image": {"name": image, "kind": "container", "framework": "pytorch",
                              "framework_version": version},
                    "global_batch_size": batch * devices, "env": {}},
           "provenance": {}, "fingerprint": machine and {**machine, "fabric": fabric, "nodes": nodes}}
    extra: dict[str, Any] = {"framework": "pytorch", "framework_version": version}
    if comm:
        extra.update(benchmark="allreduce", backend="gloo", dtype="float32")
        row = {"metric": "busbw", "value": value, "unit": "GB/s", "collective": "all_reduce", "extra": extra}
    else:
        extra.update(global_batch_size=batch * devices, amp_dtype="bfloat16" if precision == "amp" else None,
                     knobs=REFERENCE_KNOBS)
        row = {"metric": "throughput", "value": value, "unit": "images/sec", "model": model, "extra": extra}
    if verdict_inputs is not None:  # what the harness records of the timed steps (dlrun.results.quality)
        extra["quality"] = verdict_inputs
    return run, [row]


def around(value: float, spread: float = 1.02) -> list[float]:
    """Three repeats spread multiplicatively around `value`: their geometric mean is `value`."""
    return [value / spread, value, value * spread]


def add(store: Store, values: list[float], **fields: Any) -> list[str]:
    ids = []
    for value in values:
        run, rows = record(value, **fields)
        store.add_run(run, rows)
        ids.append(run["id"])
    return ids


def on_logs(values: list[float]) -> tuple[float, float, float]:
    """(geometric mean, 95 % CI low, high) as `scipy.stats` computes them: t.interval on the logs, exp'd."""
    import numpy as np
    import scipy.stats

    logs = np.log(values)
    low, high = scipy.stats.t.interval(0.95, len(values) - 1, loc=logs.mean(), scale=scipy.stats.sem(logs))
    return float(np.exp(logs.mean())), float(np.exp(low)), float(np.exp(high))


def welch_on_logs(base: list[float], other: list[float]) -> dict[str, float]:
    """The ratio of geometric means other / base, its 95 % CI, p and degrees of freedom, as `scipy.stats`
    computes them: ttest_ind(log other, log base, equal_var=False), exp'd."""
    import numpy as np
    import scipy.stats

    test = scipy.stats.ttest_ind(np.log(other), np.log(base), equal_var=False)
    low, high = test.confidence_interval(0.95)
    return {"ratio": float(scipy.stats.gmean(other) / scipy.stats.gmean(base)), "low": float(np.exp(low)),
            "high": float(np.exp(high)), "p": float(test.pvalue), "dof": float(test.df), "t": float(test.statistic)}
