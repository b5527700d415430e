"""Statistics on repeated runs: summary with a 95 % confidence interval, Welch's t-test, a bootstrap
interval for a ratio of means, and the sentence a regression check prints.

Standard library only (no scipy): Student's t distribution comes from the regularized incomplete beta
function, evaluated with the continued fraction of Numerical Recipes (Press et al., 3rd ed., Sec. 6.4) and
inverted by bisection, so non-integer degrees of freedom (Welch–Satterthwaite) work too. The test suite
checks these numbers against values computed with SciPy.
"""
from __future__ import annotations

import functools
import math
import random
from dataclasses import asdict, dataclass
from typing import Any, Sequence

CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20190412  # fixed: the same runs always give the same interval
# Above this many resampled values (resamples x runs: 50 runs a side) the bootstrap would take a tenth of a
# second per ratio in pure Python; there the delta-method interval, which the bootstrap converges to for
# large samples, is used instead.
BOOTSTRAP_BUDGET = 200_000


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz's method)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10_000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            return h
    raise ArithmeticError(f"incomplete beta did not converge for a={a}, b={b}, x={x}")


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"x must lie in [0, 1], got {x}")
    if x in (0.0, 1.0):
        return x
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    front = math.exp(log_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_continued_fraction(a, b, x) / a
    return 1.0 - front * _beta_continued_fraction(b, a, 1.0 - x) / b


def t_cdf(t: float, dof: float) -> float:
    """P(T <= t) for Student's t with `dof` degrees of freedom (any real dof > 0)."""
    if dof <= 0:
        raise ValueError(f"degrees of freedom must be > 0, got {dof}")
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    tail = 0.5 * betainc(dof / 2.0, 0.5, dof / (dof + t * t))
    return 1.0 - tail if t > 0 else tail


def t_pdf(t: float, dof: float) -> float:
    log_norm = math.lgamma((dof + 1) / 2) - math.lgamma(dof / 2) - 0.5 * math.log(dof * math.pi)
    return math.exp(log_norm - (dof + 1) / 2 * math.log1p(t * t / dof))


@functools.lru_cache(maxsize=4096)
def t_quantile(p: float, dof: float) -> float:
    """The t with P(T <= t) = p: Newton's method on the CDF, kept inside a bracket that bisection
    narrows whenever a Newton step would leave it, to machine precision."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must lie in (0, 1), got {p}")
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_quantile(1.0 - p, dof)
    low, high = 0.0, 1.0
    while t_cdf(high, dof) < p:
        low, high = high, high * 2.0
    t = 0.5 * (low + high)
    for _ in range(200):
        error = t_cdf(t, dof) - p
        if error < 0:
            low = t
        else:
            high = t
        density = t_pdf(t, dof)
        step = t - error / density if density > 0 else low - 1.0
        nxt = step if low < step < high else 0.5 * (low + high)
        if abs(nxt - t) <= 1e-14 * max(1.0, abs(t)):
            return nxt
        t = nxt
    return t


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


@dataclass(frozen=True)
class Summary:
    """n, mean, median, min, max, sample standard deviation and the t-based 95 % CI of the mean.

    With one run there is no spread: `stdev` and the interval are None, never zero."""

    n: int
    mean: float
    median: float
    min: float
    max: float
    stdev: float | None
    ci_low: float | None
    ci_high: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(values: Sequence[float], confidence: float = CONFIDENCE) -> Summary:
    if not values:
        raise ValueError("no values to summarize")
    m, s = mean(values), stdev(values)
    low = high = None
    if s is not None:
        half = t_quantile(0.5 + confidence / 2, len(values) - 1) * s / math.sqrt(len(values))
        low, high = m - half, m + half
    return Summary(len(values), m, median(values), min(values), max(values), s, low, high)


@dataclass(frozen=True)
class Welch:
    """Welch's unequal-variance t-test of mean(other) - mean(base), with its 95 % CI of the difference."""

    t: float
    dof: float
    p_value: float
    diff: float
    diff_low: float
    diff_high: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def welch(base: Sequence[float], other: Sequence[float], confidence: float = CONFIDENCE) -> Welch | None:
    """None when either side has fewer than 2 runs (no variance, no test)."""
    if len(base) < 2 or len(other) < 2:
        return None
    va, vb = stdev(base) ** 2 / len(base), stdev(other) ** 2 / len(other)
    diff = mean(other) - mean(base)
    se = math.sqrt(va + vb)
    if se == 0.0:  # identical repeats on both sides: the difference is exact
        dof = float(len(base) + len(other) - 2)
        return Welch(math.copysign(math.inf, diff) if diff else 0.0, dof, 0.0 if diff else 1.0, diff, diff, diff)
    dof = (va + vb) ** 2 / (va ** 2 / (len(base) - 1) + vb ** 2 / (len(other) - 1))
    t = diff / se
    p = 2.0 * t_cdf(-abs(t), dof)
    half = t_quantile(0.5 + confidence / 2, dof) * se
    return Welch(t, dof, p, diff, diff - half, diff + half)


@dataclass(frozen=True)
class RatioInterval:
    """mean(other) / mean(base) with a 95 % interval; `method` says how the interval was made."""

    ratio: float
    low: float | None
    high: float | None
    method: str  # "bootstrap" | "delta" | "none"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def ratio_interval(base: Sequence[float], other: Sequence[float], confidence: float = CONFIDENCE,
                   resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> RatioInterval:
    """Percentile bootstrap interval of mean(other) / mean(base), resampling each side independently.

    A side with one run is not resampled (it has no spread to draw from); with one run on both sides
    there is no interval."""
    mb, mo = mean(base), mean(other)
    if mb == 0:
        raise ZeroDivisionError("the baseline mean is zero; a ratio to it is undefined")
    ratio = mo / mb
    if len(base) < 2 and len(other) < 2:
        return RatioInterval(ratio, None, None, "none")
    if resamples * (len(base) + len(other)) > BOOTSTRAP_BUDGET:
        return _delta_interval(base, other, confidence)
    rng = random.Random(seed)
    ratios = []
    for _ in range(resamples):
        b = mb if len(base) < 2 else sum(rng.choices(base, k=len(base))) / len(base)
        o = mo if len(other) < 2 else sum(rng.choices(other, k=len(other))) / len(other)
        ratios.append(o / b if b else math.inf)
    ratios.sort()
    alpha = (1.0 - confidence) / 2
    low = ratios[int(math.floor(alpha * (resamples - 1)))]
    high = ratios[int(math.ceil((1.0 - alpha) * (resamples - 1)))]
    return RatioInterval(ratio, low, high, "bootstrap")


def _normal_quantile(p: float) -> float:
    """Standard normal quantile, by bisection on the error function."""
    low, high = -40.0, 40.0
    for _ in range(200):
        mid = 0.5 * (low + high)
        if 0.5 * math.erfc(-mid / math.sqrt(2.0)) < p:
            low = mid
        else:
            high = mid
    return 0.5 * (low + high)


def _delta_interval(base: Sequence[float], other: Sequence[float], confidence: float) -> RatioInterval:
    """Large-sample interval of a ratio of independent means: var(r)/r² ≈ var(mo)/mo² + var(mb)/mb²."""
    mb, mo = mean(base), mean(other)
    ratio = mo / mb
    rel = 0.0
    for values, m in ((base, mb), (other, mo)):
        s = stdev(values)
        if s is not None and m:
            rel += (s * s / len(values)) / (m * m)
    z = _normal_quantile(0.5 + confidence / 2)
    half = z * abs(ratio) * math.sqrt(rel)
    return RatioInterval(ratio, ratio - half, ratio + half, "delta")


def verdict(base: Sequence[float], other: Sequence[float],
            alpha: float = 1.0 - CONFIDENCE) -> tuple[str, Welch | None]:
    """"slower by 4.1 % (95 % CI 2.7–5.1 %, p = 0.001)", "faster by …", "no significant difference
    (p = 0.42)", or why no test was possible, for a rate (higher is better: throughput, bandwidth).

    Percentages are of the baseline mean; the interval is Welch's CI of the difference of means, so it
    excludes 0 exactly when the test is significant."""
    test = welch(base, other)
    if test is None:
        return f"not tested: needs at least 2 runs on each side (have {len(base)} and {len(other)})", None
    if test.p_value >= alpha:
        return f"no significant difference (p = {test.p_value:.2g})", test
    scale = 100.0 / mean(base)
    change, low, high = test.diff * scale, test.diff_low * scale, test.diff_high * scale
    word = "faster" if change > 0 else "slower"
    lo, hi = sorted((abs(low), abs(high)))
    return f"{word} by {abs(change):.1f} % (95 % CI {lo:.1f}–{hi:.1f} %, p = {test.p_value:.2g})", test
