"""Resuming: which runs of a point the store already holds, so that `dlrun reproduce` runs only the missing
repeats, and an interrupted reproduce continues where it stopped.

A stored run counts for a point when it succeeded, carries the experiment and point it was run for, and is
like-for-like with the run the point would make now (its key). Every run reproduce makes goes through a
`TaggedStore`, which writes those tags.

The key here is a stand-in for the store's comparability key (`dlrun.results.key`, which is on its way): the
settings of the resolved plan that decide a run's value, read back from each stored run's plan. Switching to
the store's key changes `point_key` and the query in `stored_runs`, nothing else.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlrun.results.store import Store

#: The `kind` of the plan record of a model-facts run (counted in-process, not launched).
MODEL_FACTS = "model-facts"

Key = dict[str, Any]


class TaggedStore(Store):
    """The result store, tagging every run added through it with its experiment and point: as the run's
    `experiment` and `point` (columns of the store's next schema) and in its provenance (read back here)."""

    def __init__(self, path: Path, experiment: str, point: str):
        super().__init__(path)
        self.tags = {"experiment": experiment, "point": point}

    def add_run(self, run: dict[str, Any], results: list[dict[str, Any]]) -> None:
        provenance = {**(run.get("provenance") or {}), **self.tags}
        super().add_run({**run, **self.tags, "provenance": provenance}, results)


def point_key(plan: Mapping[str, Any]) -> Key:
    """What makes two runs of a point like-for-like, from a plan as stored (`Plan.summary()`, or the plan
    record of a model-facts run)."""
    if plan.get("kind") == MODEL_FACTS:
        return {name: plan.get(name) for name in ("kind", "workload", "model", "harness_sha256")}
    workload, image, system = plan["workload"], plan["image"], plan["system"]
    nodes = plan["nodes"]
    return {"workload": workload["name"], "model": workload.get("model"), "precision": plan["precision"],
            "batch_per_device": None if workload.get("kind") == "allreduce" else plan["batch_size"],
            "devices": plan["nodes"] * plan["ranks_per_node"], "nodes": nodes, "system": system["name"],
            "fabric": plan["fabric"] if nodes > 1 else "n/a", "image": image["name"],
            "image_digest": image.get("digest"), "framework": image.get("framework")}


@dataclass
class StoredRun:
    id: str
    created_at: str
    values: dict[str, float] = field(default_factory=dict)  # metric -> value
    units: dict[str, str] = field(default_factory=dict)


def stored_runs(store: Store, experiment: str, point: str, key: Key) -> list[StoredRun]:
    """The successful runs of `point` of `experiment` whose key is `key`, oldest first, with their values.
    Nothing when the store does not exist yet (reading must not create it: a dry run writes nothing)."""
    if not store.path.exists():
        return []
    with store.connect() as conn:
        rows = conn.execute(
            "SELECT id, created_at, plan FROM runs WHERE status = 'ok' "
            "AND json_extract(provenance, '$.experiment') = ? AND json_extract(provenance, '$.point') = ? "
            "ORDER BY created_at, id", (experiment, point)).fetchall()
        runs = [StoredRun(run_id, created) for run_id, created, plan in rows if point_key(json.loads(plan)) == key]
        for run in runs:
            for metric, value, unit in conn.execute("SELECT metric, value, unit FROM results WHERE run_id = ?",
                                                    (run.id,)):
                run.values[metric] = value
                run.units[metric] = unit
    return runs


def stored_repeats(store: Store, experiment: str, point: str, key: Key) -> int:
    """How many repeats of the point the store already holds."""
    return len(stored_runs(store, experiment, point, key))
