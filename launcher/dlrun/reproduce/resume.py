"""Resuming: which runs of a point the store already holds, so that `dlrun reproduce` runs only the missing
repeats, and an interrupted reproduce continues where it stopped.

A stored run counts for a point when it succeeded, belongs to the experiment and point (the store's
`experiment` and `point` columns, which every run reproduce makes gets through a `TaggedStore`), was made at
this site (not read from another site's bundle), and its comparability key (`dlrun.results.key`) agrees with
the key the point's plan decides, this site and, for a point that runs on this node, this machine included.
Other sites' runs are evidence to compare with (`dlrun compare --by site`), never a substitute for a run
here. What only the finished run reports (the framework version of the host's PyTorch, the half-precision
type the device chose, the CUDA stack it saw, the machine of a batch job's node) is left out of that
comparison; the image identity (its digest, or for the host the harness files' digest) stands for it.
Model-facts points are matched on what they count and the harness that counts it.
"""
from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlrun.harness.harness_contract import split_precision_label
from dlrun.execute.record import run_row
from dlrun.paths import harness_hashes
from dlrun.plan import Plan
from dlrun.registry import SCHEDULERS
from dlrun.results.fingerprint import this_machine
from dlrun.results.key import KEY_FIELDS, UNKNOWN, key_from_run
from dlrun.results.store import Store

#: The `kind` of the plan record of a model-facts run (counted in-process, not launched).
MODEL_FACTS = "model-facts"
#: What a model-facts run is: the model counted, and the harness files that counted it.
FACTS_IDENTITY = ("kind", "workload", "model", "harness_sha256")

Key = dict[str, Any]


class TaggedStore(Store):
    """The result store, tagging every run added through it with its experiment and point."""

    def __init__(self, path: Path, experiment: str, point: str):
        super().__init__(path)
        self.tags = {"experiment": experiment, "point": point}

    def add_run(self, run: dict[str, Any], results: list[dict[str, Any]]) -> None:
        super().add_run({**run, **self.tags}, results)


@functools.lru_cache(maxsize=None)
def _harness_digest(harness_dir: str, framework: str) -> str | None:
    return harness_hashes(Path(harness_dir), framework)[0]


def planned_key(plan: Plan) -> Key:
    """The comparability key a run of `plan` will be stored with, as far as the plan decides it (the
    record the executor stores, without the result the run adds)."""
    host = plan.image.kind == "host"
    harness = _harness_digest(plan.image.harness_dir, plan.image.harness_framework or plan.workload.framework) \
        if host else None
    # the row the executor stores (dlrun.execute.record.run_row), before the run adds its result
    record = run_row(plan.summary(), run_id="planned", run_dir=Path("."), status="planned", started=0.0,
                     finished=0.0, provenance={"harness_sha256": harness})
    # the machine where the job runs on this node; a batch job's node is known once it has run
    record["fingerprint"] = this_machine(fabric=plan.fabric, nodes=plan.nodes, device=plan.device) \
        if SCHEDULERS.get(plan.scheduler).runs_here else None
    return key_from_run(record, [])


def facts_key(facts_plan: Mapping[str, Any]) -> Key:
    return {name: facts_plan.get(name) for name in FACTS_IDENTITY}


def same_point(key: Key, stored: Key) -> bool:
    """Whether a stored run's key is the one `key` (a planned key) asks for."""
    for name in KEY_FIELDS:
        wanted, found = key.get(name, UNKNOWN), stored.get(name, UNKNOWN)
        if wanted == UNKNOWN:
            continue  # only the run tells (see the module's docstring)
        if name == "precision" and isinstance(found, str):
            found = split_precision_label(found)[0]  # amp(bfloat16): amp, in the type the device has
        if wanted != found:
            return False
    return True


@dataclass
class StoredRun:
    id: str
    created_at: str
    values: dict[str, float] = field(default_factory=dict)  # metric -> value
    units: dict[str, str] = field(default_factory=dict)
    verdict: str = "unknown"  # its quality verdict (dlrun.results.quality)


def _matches(key: Key, stored_key: str | None, plan: str) -> bool:
    if key.get("kind") == MODEL_FACTS:
        return facts_key(json.loads(plan)) == key
    return stored_key is not None and same_point(key, json.loads(stored_key))


def stored_runs(store: Store, experiment: str, point: str, key: Key) -> list[StoredRun]:
    """The successful runs of `point` of `experiment` that match `key`, oldest first, with their values.
    Nothing when the store does not exist yet (reading must not create it: a dry run writes nothing)."""
    if not store.exists():
        return []
    with store.connect() as conn:
        rows = conn.execute("SELECT id, created_at, key, plan, verdict FROM runs WHERE status = 'ok' AND "
                            "experiment = ? AND point = ? AND coalesce(origin, 'local') != 'bundle' "
                            "ORDER BY created_at, id", (experiment, point)).fetchall()
        runs = [StoredRun(run_id, created, verdict=verdict or "unknown")
                for run_id, created, stored_key, plan, verdict in rows if _matches(key, stored_key, plan)]
        for run in runs:
            for metric, value, unit in conn.execute("SELECT metric, value, unit FROM results WHERE run_id = ?",
                                                    (run.id,)):
                run.values[metric] = value
                run.units[metric] = unit
    return runs


def stored_repeats(store: Store, experiment: str, point: str, key: Key) -> int:
    """How many repeats of the point the store already holds."""
    return len(stored_runs(store, experiment, point, key))
