"""The gate's sources put together: each selected configuration against the site's references that apply
to it, else against its baseline; and an experiment's published numbers where one is named."""
from __future__ import annotations

from dataclasses import dataclass

from dlrun.errors import UsageError
from dlrun.results.compare.stats import MIN_REPEATS
from dlrun.results.store import Store
from dlrun.results.store.query import Filters

from dlrun.gate import OUTCOMES, Outcome
from dlrun.gate.baseline import judge_baseline
from dlrun.gate.series import load
from dlrun.gate.site_references import judge_site_references, site_references


@dataclass(frozen=True)
class Settings:
    newest: int = MIN_REPEATS       # runs per key judged: the newest
    baseline_runs: int = 10         # ok runs before them that make the baseline
    tolerance: float = 0.05         # the baseline's band, a fraction
    experiment: str | None = None   # judge its published numbers too


def validate(settings: Settings) -> None:
    if settings.newest < 1:
        raise UsageError(f"bad --newest {settings.newest}: the runs judged per configuration; valid: 1 or more "
                         f"({MIN_REPEATS} or more give an interval)")
    if settings.baseline_runs < 1:
        raise UsageError(f"bad --baseline-runs {settings.baseline_runs}: valid: 1 or more ({MIN_REPEATS} or more "
                         "give an interval)")
    if not 0 < settings.tolerance < 1:
        raise UsageError(f"bad --tolerance {settings.tolerance * 100:g}: valid: a percentage above 0 and below 100")


def run_checks(store: Store, filters: Filters, settings: Settings, catalog=None) -> list[Outcome]:
    """Every outcome, worst first, then by system and subject."""
    validate(settings)
    try:
        series = load(store, filters, settings.newest, settings.baseline_runs)
    except UsageError:
        if settings.experiment is None:
            raise
        series = []  # the experiment's published numbers say what is missing
    outcomes, judged = judge_site_references(store, series, site_references())
    outcomes += [judge_baseline(s, settings.tolerance) for s in series if s.group.key_hash not in judged]
    if settings.experiment is not None:
        from dlrun.gate.published import judge_published

        outcomes += judge_published(catalog, store, settings.experiment)
    return sorted(outcomes, key=lambda o: (OUTCOMES.index(o.outcome), o.system, o.subject, o.against))
