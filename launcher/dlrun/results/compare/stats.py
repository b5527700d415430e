"""Statistics on repeated runs: one method per question (docs/results.md, "Statistics").

Rates (throughput, bandwidth) are positive and their run-to-run spread is multiplicative, so everything is
computed on the logarithms of the repeats and taken back with exp():

- one configuration: the geometric mean of its repeats, with the t interval of the mean of their logs
  (n - 1 degrees of freedom): never below zero;
- two configurations (speedup, relative throughput, slowdown, scaling efficiency): the ratio of their
  geometric means, with Welch's t interval of the difference of the mean logs (Welch–Satterthwaite degrees
  of freedom): always positive, so a slowdown stays below 100 %. Welch's test is the same computation, so a
  difference is significant exactly when the interval excludes a ratio of 1;
- against a published band: `within` when the interval lies inside the band, `outside` when it lies
  entirely outside, else `inconclusive`, with the repeats the current spread says would decide.

Below MIN_REPEATS repeats (a side) there is no interval, no test and no verdict but `inconclusive`: an
interval from two runs says more about luck than about the machine.

Student's t distribution is SciPy's (`scipy.special.stdtr`, `stdtrit`), imported on first use; this module
never imports `scipy.stats` (0.7 s of import, against the 2 s that compare and report may take).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from dlrun.results.moments import Sample, moments_of

CONFIDENCE = 0.95
#: The fewest repeats (a side) an interval, a test or a within/outside verdict is given for.
MIN_REPEATS = 3
#: repeats_to_decide() looks no further than this many repeats.
MAX_REPEATS_ESTIMATE = 1000

#: How each number is made, as the JSON of `compare` and the report state it.
METHOD = {
    "estimate": "geometric mean of the repeats",
    "interval": "t interval of the mean of the logs of the repeats, taken back with exp (never below 0)",
    "ratio": "ratio of geometric means; Welch's t interval and test on the difference of the mean logs",
    "confidence": CONFIDENCE,
    "min_repeats": MIN_REPEATS,
}


def t_quantile(p: float, dof: float) -> float:
    """The t with P(T <= t) = p for Student's t with `dof` (> 0, any real) degrees of freedom."""
    from scipy.special import stdtrit

    return float(stdtrit(dof, p))


def t_cdf(t: float, dof: float) -> float:
    """P(T <= t) for Student's t with `dof` degrees of freedom."""
    from scipy.special import stdtr

    return float(stdtr(dof, t))


def mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


def stdev(values: Sequence[float]) -> float | None:
    """Sample standard deviation (n - 1 in the denominator); None for fewer than 2 values."""
    n = len(values)
    if n < 2:
        return None
    m = mean(values)
    return math.sqrt(math.fsum((v - m) ** 2 for v in values) / (n - 1))


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    return ordered[n // 2] if n % 2 else 0.5 * (ordered[n // 2 - 1] + ordered[n // 2])


def logs(values: Sequence[float]) -> list[float]:
    """The natural logs of positive finite values; anything else is not a rate (a ValueError)."""
    out = []
    for v in values:
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise ValueError(f"{v!r} is not a positive finite rate; statistics on logs need one")
        out.append(math.log(v))
    return out


def geometric_mean(values: Sequence[float] | Sample) -> float:
    if isinstance(values, Sample):
        return math.exp(values.moments.mean_log())
    return math.exp(mean(logs(values)))


def mean_rate(values: Sequence[float] | Sample) -> float:
    """The arithmetic mean of rates (from their exact moments)."""
    return moments_of(values).mean()


def too_few(*sizes: int) -> str:
    have = " and ".join(str(n) for n in sizes)
    a_side = " a side" if len(sizes) > 1 else ""
    return f"too few repeats ({have}; an interval needs at least {MIN_REPEATS}{a_side})"


@dataclass(frozen=True)
class LogEstimate:
    """An estimate on the log scale: the mean log (or a difference of mean logs), its standard error and
    degrees of freedom (None below MIN_REPEATS repeats a side), and each side's (sd of logs, n), from which
    repeats_to_decide() projects how many repeats would narrow the interval enough."""

    centre: float
    se: float | None
    dof: float | None
    sides: tuple[tuple[float | None, int], ...]
    confidence: float = CONFIDENCE

    @classmethod
    def exact(cls, value: float) -> LogEstimate:
        """A number without sampling error (a counted fact): a point interval."""
        return cls(math.log(value), 0.0, math.inf, ())

    @property
    def half_width(self) -> float | None:
        if self.se is None or self.dof is None:
            return None
        if self.se == 0.0:
            return 0.0
        return t_quantile(0.5 + self.confidence / 2, self.dof) * self.se

    def bounds(self) -> tuple[float, float] | None:
        """(low, high) on the log scale, or None (too few repeats)."""
        half = self.half_width
        return None if half is None else (self.centre - half, self.centre + half)


@dataclass(frozen=True)
class Summary:
    """n, the geometric mean with its 95 % interval (None below MIN_REPEATS: `interval` says why), the
    sample standard deviation of the repeats (None for one run, never zero by default), median, min, max."""

    n: int
    geomean: float
    ci_low: float | None
    ci_high: float | None
    interval: str
    stdev: float | None
    median: float
    min: float
    max: float
    estimate: LogEstimate = field(repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {"n": self.n, "geomean": self.geomean, "ci_low": self.ci_low, "ci_high": self.ci_high,
                "interval": self.interval, "stdev": self.stdev, "median": self.median, "min": self.min,
                "max": self.max}


def summarize(values: Sequence[float] | Sample, confidence: float = CONFIDENCE) -> Summary:
    """From the exact moments of the values (dlrun.results.moments): a list and the store's aggregates of the
    same runs give the same summary, to the last bit."""
    if not values:
        raise ValueError("no values to summarize")
    moments = moments_of(values)
    n, centre, sd = moments.n, moments.mean_log(), moments.sd_log()
    if n < MIN_REPEATS:
        estimate = LogEstimate(centre, None, None, ((sd, n),), confidence)
        how = too_few(n)
    else:
        estimate = LogEstimate(centre, sd / math.sqrt(n), float(n - 1), ((sd, n),), confidence)
        how = f"{confidence * 100:g} % t interval on logs"
    bounds = estimate.bounds()
    low, high = (math.exp(bounds[0]), math.exp(bounds[1])) if bounds else (None, None)
    middle = values.median() if isinstance(values, Sample) else median(values)
    return Summary(n, math.exp(centre), low, high, how, moments.sd(), middle, moments.low, moments.high, estimate)


@dataclass(frozen=True)
class Ratio:
    """geomean(other) / geomean(base) with its interval and Welch's test, from one computation on the logs.

    `significant` is None without a test (too few repeats), else True exactly when the interval excludes 1
    (and then p < 1 - confidence)."""

    ratio: float
    low: float | None
    high: float | None
    p_value: float | None
    t: float | None
    dof: float | None
    significant: bool | None
    interval: str
    estimate: LogEstimate = field(repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {"ratio": self.ratio, "low": self.low, "high": self.high, "p_value": self.p_value, "t": self.t,
                "dof": self.dof, "significant": self.significant, "interval": self.interval}


def ratio(base: Sequence[float] | Sample, other: Sequence[float] | Sample, confidence: float = CONFIDENCE) -> Ratio:
    """The ratio of geometric means other / base: Welch's t on the logs gives its interval and test (from the
    exact moments of each side, as summarize)."""
    mb, mo = moments_of(base), moments_of(other)
    nb, no = mb.n, mo.n
    centre = mo.mean_log() - mb.mean_log()
    sb, so = mb.sd_log(), mo.sd_log()
    sides = ((sb, nb), (so, no))
    if nb < MIN_REPEATS or no < MIN_REPEATS:
        estimate = LogEstimate(centre, None, None, sides, confidence)
        return Ratio(math.exp(centre), None, None, None, None, None, None, too_few(nb, no), estimate)
    assert sb is not None and so is not None
    vb, vo = sb * sb / nb, so * so / no
    se = math.sqrt(vb + vo)
    if se == 0.0:  # identical repeats on both sides: the ratio is exact
        dof = float(nb + no - 2)
        estimate = LogEstimate(centre, 0.0, dof, sides, confidence)
        r = math.exp(centre)
        return Ratio(r, r, r, 0.0 if centre else 1.0, None, dof, centre != 0.0,
                     "exact: identical repeats on both sides", estimate)
    dof = (vb + vo) ** 2 / (vb * vb / (nb - 1) + vo * vo / (no - 1))
    estimate = LogEstimate(centre, se, dof, sides, confidence)
    low, high = estimate.bounds()  # type: ignore[misc]
    t = centre / se
    p = 2.0 * t_cdf(-abs(t), dof)
    significant = low > 0.0 or high < 0.0
    return Ratio(math.exp(centre), math.exp(low), math.exp(high), p, t, dof, significant,
                 f"{confidence * 100:g} % Welch t interval on logs", estimate)


def change_sentence(r: Ratio, words: tuple[str, str] = ("slower", "faster"), better: str = "higher") -> str:
    """"slower by 4.1 % (95 % CI 2.7–5.1 %, p = 0.001)", "faster by …", "no significant difference (…)",
    or why there is no test, for a rate (higher is better; `words` name a lower and a higher value).
    Percentages are of the baseline's geometric mean; a slowdown and its interval stay below 100 %. For a
    value that is better lower (a latency): "lower (better) by …" / "higher (worse) by …"."""
    if r.low is None or r.high is None or r.p_value is None:
        return f"not tested: {r.interval}"
    level = f"{r.estimate.confidence * 100:g} % CI"
    if not r.significant:
        return (f"no significant difference (p = {r.p_value:.2g}; {level} "
                f"{(r.low - 1) * 100:+.1f} % to {(r.high - 1) * 100:+.1f} %)")
    if better == "lower":
        words = ("lower (better)", "higher (worse)")
    if r.ratio < 1.0:
        return (f"{words[0]} by {(1 - r.ratio) * 100:.1f} % ({level} {(1 - r.high) * 100:.1f}–{(1 - r.low) * 100:.1f} %,"
                f" p = {r.p_value:.2g})")
    return (f"{words[1]} by {(r.ratio - 1) * 100:.1f} % ({level} {(r.low - 1) * 100:.1f}–{(r.high - 1) * 100:.1f} %,"
            f" p = {r.p_value:.2g})")


@dataclass(frozen=True)
class Judgement:
    """A verdict against a published band: within | outside | inconclusive. For inconclusive,
    `repeats_needed` is the number of repeats (per point) the current spread says would decide, None where
    nothing can tell (one run: no spread; an estimate on the band's edge; more than MAX_REPEATS_ESTIMATE)."""

    verdict: str
    repeats_needed: int | None = None
    why: str = ""


def judge(estimate: LogEstimate, low: float, high: float) -> Judgement:
    """`estimate` against the band [low, high] (on the log scale; -inf and inf for open ends)."""
    bounds = estimate.bounds()
    what = "the interval" if estimate.sides else "the exact value"
    if bounds is not None:
        if low <= bounds[0] and bounds[1] <= high:
            return Judgement("within", None, f"{what} lies inside the tolerance band")
        if bounds[1] < low or bounds[0] > high:
            return Judgement("outside", None, f"{what} lies outside the tolerance band")
    needed = repeats_to_decide(estimate, low, high)
    sizes = [n for _, n in estimate.sides]
    if bounds is None:
        why = too_few(*sizes)
    else:
        why = "the interval straddles an edge of the tolerance band"
    if needed is not None:
        why += f"; about {needed} repeats per point would decide, at the spread seen so far"
    elif any(sd is None for sd, _ in estimate.sides):
        why += f"; run at least {MIN_REPEATS} repeats per point to know the spread"
    return Judgement("inconclusive", needed, why)


def repeats_to_decide(estimate: LogEstimate, low: float, high: float) -> int | None:
    """The fewest repeats N per side (at least MIN_REPEATS and the most any side has) for which an interval
    with each side's current spread of logs would lie wholly inside or wholly outside [low, high]; None
    when a side's spread is unknown (one run), the estimate sits on an edge, or N > MAX_REPEATS_ESTIMATE."""
    import numpy as np
    from scipy.special import stdtrit

    if not estimate.sides or any(sd is None for sd, _ in estimate.sides):
        return None
    c = estimate.centre
    distance = min(c - low, high - c) if low <= c <= high else (low - c if c < low else c - high)
    start = max([MIN_REPEATS] + [n for _, n in estimate.sides])
    if distance <= 0.0:
        return None
    variance = sum(sd * sd for sd, _ in estimate.sides)  # type: ignore[operator]
    if variance == 0.0:
        return start
    n = np.arange(start, MAX_REPEATS_ESTIMATE + 1, dtype=float)
    k = len(estimate.sides)
    # N repeats on each of k sides: Welch–Satterthwaite reduces to k (N - 1) dof for equal spreads
    sds = np.array([sd for sd, _ in estimate.sides], dtype=float)
    per_side = sds[:, None] ** 2 / n[None, :]
    dof = per_side.sum(axis=0) ** 2 / (per_side ** 2 / (n[None, :] - 1)).sum(axis=0) if k > 1 else n - 1
    half = stdtrit(dof, 0.5 + estimate.confidence / 2) * np.sqrt(variance / n)
    ok = np.nonzero(half < distance)[0]
    return int(n[ok[0]]) if len(ok) else None
