"""The selected runs per configuration, in the order they were made: the newest ones (what a night judges)
and the ok runs before them (the site's baseline of that key)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dlrun.errors import DlrunError, UsageError
from dlrun.results.compare.select import Group, load_groups
from dlrun.results.key import UNKNOWN
from dlrun.results.store import Store
from dlrun.results.store.query import Filters


@dataclass(frozen=True)
class Series:
    """One key's successful runs with a positive value, oldest first, split into the `newest` and the
    `earlier` ones (at most the baseline's size, the most recent before the newest)."""

    group: Group
    newest: tuple[tuple[str, float], ...]
    earlier: tuple[tuple[str, float], ...]

    @property
    def key(self) -> dict[str, Any]:
        return self.group.key

    @property
    def system(self) -> str:
        return str(self.key.get("system", UNKNOWN))

    @property
    def better(self) -> str:
        """Which way the metric is better: lower for a latency, higher for every rate."""
        from dlrun.results.parsers.figure_of_merit import LOWER_IS_BETTER

        return "lower" if self.group.metric in LOWER_IS_BETTER else "higher"


def subject(key: dict[str, Any]) -> str:
    """A configuration in a few words: workload (model), devices, precision, batch, system."""
    model = key.get("model")
    text = str(key.get("workload"))
    if model not in (None, UNKNOWN, key.get("workload")) and not str(model).startswith("n/a"):
        text += f" ({model})"
    devices = key.get("devices")
    parts = [f"{devices} device{'' if devices == 1 else 's'}", str(key.get("precision"))]
    if isinstance(key.get("batch_per_device"), int):
        parts.append(f"batch {key['batch_per_device']}/device")
    return f"{text}, {', '.join(parts)} on {key.get('system')}"


def load(store: Store, filters: Filters, newest: int, baseline_runs: int) -> list[Series]:
    """Every selected key's runs split into its newest `newest` and up to `baseline_runs` before them."""
    try:
        groups = load_groups(store, filters)
    except DlrunError as exc:
        raise UsageError(f"nothing to check: {str(exc).removeprefix('nothing to compare: ')}; valid: filters "
                         "that select stored ok runs (see dlrun results list)") from None
    made = {run["id"]: (run["created_at"] or "", run["id"])
            for run in store.list_runs(None, Filters(run_ids=tuple(r for g in groups for r in g.run_ids)))}
    out = []
    for group in groups:
        ordered = sorted(zip(group.run_ids, group.values), key=lambda pair: made.get(pair[0], ("", pair[0])))
        split = max(len(ordered) - newest, 0)
        out.append(Series(group, tuple(ordered[split:]), tuple(ordered[max(split - baseline_runs, 0):split])))
    return out
