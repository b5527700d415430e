"""Model-facts points: count a model's parameters and forward multiply-adds in this process, on the harness's
own definition, and store the counts as a run with result rows (metrics `params` and `forward_macs`), so that
they are read back, compared and resumed like any measured result."""
from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dlrun import __version__
from dlrun.execute.rundir import new_run_id
from dlrun.reproduce.resume import TaggedStore
from dlrun.reproduce.work import PointWork

#: model name in the harness -> {"params", "forward_macs", "image_size", ...} (`dlrun.harness.describe_model`,
#: passed in by the caller: the harness sits above this layer).
Describe = Callable[[str], dict[str, Any]]

#: metric -> unit, as the references of a model-facts experiment name them.
FACT_UNITS = {"params": "parameters", "forward_macs": "multiply-adds"}


def _stamp(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def facts_rows(model: str, facts: dict[str, Any]) -> list[dict[str, Any]]:
    extra = {name: value for name, value in facts.items() if name not in FACT_UNITS and name != "model"}
    return [{"kind": "model-facts", "metric": metric, "value": float(facts[metric]), "unit": unit, "model": model,
             "extra": extra} for metric, unit in FACT_UNITS.items()]


def count_and_store(work: PointWork, describe: Describe, store_path: Path) -> dict[str, Any]:
    """Count the point's model and store the counts; return the stored run record."""
    assert work.facts is not None, "a model-facts point carries the plan record of its count"
    started = time.time()
    facts = describe(work.facts["model"])
    finished = time.time()
    record = {
        "id": new_run_id(), "created_at": _stamp(started), "finished_at": _stamp(finished), "status": "ok",
        "origin": "local", "workload": work.facts["workload"], "model": work.facts["model"],
        "plan": work.facts,
        "provenance": {"origin": "local", "dlrun_version": __version__, "counted": "in-process",
                       "harness": work.facts["harness"], "harness_sha256": work.facts["harness_sha256"],
                       "harness_files_sha256": work.facts["harness_files_sha256"],
                       "duration_s": round(finished - started, 3)},
    }
    rows = facts_rows(work.facts["model"], facts)
    TaggedStore(store_path, work.experiment, work.id).add_run(record, rows)
    return {**record, "results": rows}
