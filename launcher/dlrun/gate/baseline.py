"""A configuration's newest runs against the site's baseline of the same key: the ok runs before them.

The ratio of the newest runs' geometric mean to the baseline's, with Welch's t interval on the difference
of their mean logs (dlrun.results.compare.stats.ratio, as `dlrun compare --by image` computes it), judged
against the band [1 - tolerance, 1 + tolerance] on the log scale (stats.judge). The baseline is described by
its median and the 95 % interval of its geometric mean."""
from __future__ import annotations

import math

from dlrun.results.compare.stats import MIN_REPEATS, judge, ratio, summarize

from dlrun.gate import Outcome, outcome_of, undecided
from dlrun.gate.series import Series, subject


def _number(value: float) -> str:
    return f"{value:,.4g}"


def _baseline_words(series: Series) -> str:
    values = [v for _, v in series.earlier]
    s = summarize(values)
    unit = series.group.unit
    interval = (f", geometric mean 95 % CI {_number(s.ci_low)}-{_number(s.ci_high)}"
                if s.ci_low is not None and s.ci_high is not None else "")
    return f"baseline: median {_number(s.median)} {unit} of {s.n} earlier ok run(s){interval}"


def judge_baseline(series: Series, tolerance: float) -> Outcome:
    """The newest runs of `series` against its earlier ones, with a band of ±`tolerance` (a fraction)."""
    newest = [v for _, v in series.newest]
    common = dict(against="baseline", subject=subject(series.key), system=series.system,
                  runs=tuple(r for r, _ in series.newest), key_hash=series.group.key_hash,
                  source="the earlier ok runs of the same key in this store")
    if not series.earlier:
        return Outcome("inconclusive", why=f"no baseline yet: {len(newest)} run(s) of this key, none before "
                       f"them; {MIN_REPEATS} or more earlier ok runs make one", repeats_needed=MIN_REPEATS,
                       **common)
    r = ratio([v for _, v in series.earlier], newest)
    low, high = math.log(1.0 - tolerance), math.log(1.0 + tolerance)
    verdict = judge(r.estimate, low, high)
    mean_now = summarize(newest).geomean
    interval = (f"95 % CI of the ratio {r.low:.3f}-{r.high:.3f}" if r.low is not None and r.high is not None
                else r.interval)
    why = (f"geometric mean {_number(mean_now)} {series.group.unit} of the newest {len(newest)} run(s), "
           f"{r.ratio:.3f} x the baseline's ({interval}; band {1 - tolerance:.3f}-{1 + tolerance:.3f}); "
           f"{_baseline_words(series)}")
    outcome = outcome_of(verdict.verdict, r.ratio < 1.0, series.better)
    if outcome == "inconclusive":
        why += f"; {undecided(verdict.why, verdict.repeats_needed)}"
    elif verdict.verdict == "outside" and outcome == "pass":
        why += "; better than the baseline beyond the band"
    return Outcome(outcome, why=why, repeats_needed=verdict.repeats_needed,
                   numbers={"ratio": r.ratio, "ratio_low": r.low, "ratio_high": r.high, "geomean": mean_now,
                            "unit": series.group.unit}, **common)

