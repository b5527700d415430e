"""`dlrun check`: the gate a site's nightly pipeline runs. Stored runs are judged against references, one
outcome per configuration (comparability key) and reference, and the exit code fails the pipeline only on a
regression the statistics show.

What a configuration is judged against, in this order (dlrun.gate.sources):

- a site's own references, per system, in `config.yaml` (`references:`; dlrun.gate.site_references), judged
  by `dlrun compare`'s reference mode on the configuration's newest runs;
- the published numbers of an experiment in the catalog (`--experiment`), as `dlrun reproduce` judges them
  (dlrun.gate.published);
- otherwise the site's baseline: the ok runs of the same key before the newest ones (dlrun.gate.baseline),
  the ratio of the newest runs' geometric mean to the baseline's with Welch's interval on the logs.

Every interval and verdict is compare's (dlrun.results.compare.stats: `judge` against a tolerance band on the
log scale). Outcomes:

- `regression`: the interval lies wholly on the worse side of the band (below it for a rate);
- `pass`: the interval lies inside the band, or wholly on its better side;
- `inconclusive`: the interval straddles an edge of the band, or there are too few repeats for one; the
  outcome says how many repeats per point the spread seen so far says would decide;
- `error`: the configuration cannot be judged against the reference (not like-for-like, another unit).
"""
from __future__ import annotations

from dataclasses import dataclass, field

#: Outcomes, worst first.
OUTCOMES = ("regression", "error", "inconclusive", "pass")
#: The exit code of `dlrun check` when an outcome is a regression (else 0; bad input is 2).
REGRESSION_EXIT = 1


@dataclass(frozen=True)
class Outcome:
    """One configuration against one reference."""

    outcome: str                 # one of OUTCOMES
    against: str                 # "site reference", "published", "baseline"
    subject: str                 # the configuration in a few words
    system: str
    why: str                     # the numbers, each saying what it is
    runs: tuple[str, ...] = ()   # the run ids judged
    repeats_needed: int | None = None
    source: str = ""             # where the reference comes from
    key_hash: str = ""
    numbers: dict = field(default_factory=dict, compare=False)

    @property
    def line(self) -> str:
        return f"{self.outcome.upper():<12} {self.subject} against {self.against}: {self.why}"


def outcome_of(verdict: str, below: bool, better: str = "higher") -> str:
    """pass / regression / inconclusive from a within / outside / inconclusive verdict (stats.judge): outside is
    a regression on the worse side of the band (`below` it where higher is better), a pass on the other."""
    if verdict == "within":
        return "pass"
    if verdict == "outside":
        return "regression" if below == (better == "higher") else "pass"
    return "inconclusive"


def undecided(why: str, repeats_needed: int | None) -> str:
    """An inconclusive verdict's reason, saying when no count of repeats would decide at the spread seen."""
    from dlrun.results.compare.stats import MAX_REPEATS_ESTIMATE

    if repeats_needed is None and "would decide" not in why and "to know the spread" not in why:
        why += (f"; no count of repeats up to {MAX_REPEATS_ESTIMATE} per point would decide at the spread seen so "
                "far (make the runs steadier)")
    return why


def exit_code(outcomes: list[Outcome]) -> int:
    return REGRESSION_EXIT if any(o.outcome == "regression" for o in outcomes) else 0


def counts(outcomes: list[Outcome]) -> dict[str, int]:
    return {name: n for name in OUTCOMES if (n := sum(o.outcome == name for o in outcomes))}
