"""Exact moments of a set of rates: n, Σ log x, Σ (log x)², Σ x, Σ x², min and max.

Every statistic compare and report give (geometric means and t intervals on the logs, Welch on differences of
logs, the standard deviation of the rates) needs only these. The sums are kept exactly, as integers in units
of 2^-1074 (the smallest double) and of its square, so they do not depend on the order the runs were added
in, and a run taken out again (deleted) leaves exactly the sums of the others. The store keeps them per group
of runs as they arrive (dlrun.results.store.samples); compare makes the same from a list of values: both
give the same estimate to the last bit, and each float is rounded once, from the exact value
(`mean_log` is `math.fsum(logs) / n`, the variances are the exact sample variances, correctly rounded).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

#: Scale of a sum of doubles (2^1074: every double is a whole multiple of 2^-1074) and of a sum of squares.
SHIFT = 1074
SHIFT2 = 2 * SHIFT


def scaled(value: float) -> tuple[int, int]:
    """(value, value²) as exact integers in units of 2^-1074 and 2^-2148."""
    num, den = value.as_integer_ratio()
    k = den.bit_length() - 1
    return num << (SHIFT - k), (num * num) << (SHIFT2 - 2 * k)


def _exact_sums(values: Iterable[float]) -> tuple[int, int]:
    """(Σ v, Σ v²) exactly, as `scaled` gives each: the numerators of one power-of-two denominator are summed as
    they are (small integers), and scaled once per denominator."""
    by_den: dict[int, list[int]] = {}
    for value in values:
        num, den = value.as_integer_ratio()
        acc = by_den.get(den)
        if acc is None:
            by_den[den] = [num, num * num]
        else:
            acc[0] += num
            acc[1] += num * num
    s1 = s2 = 0
    for den, (a, b) in by_den.items():
        k = den.bit_length() - 1
        s1 += a << (SHIFT - k)
        s2 += b << (SHIFT2 - 2 * k)
    return s1, s2


def is_rate(value: float) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


@dataclass(frozen=True)
class Moments:
    n: int = 0
    s1: int = 0   # Σ log x, in units of 2^-1074
    s2: int = 0   # Σ (log x)², in units of 2^-2148
    t1: int = 0   # Σ x
    t2: int = 0   # Σ x²
    low: float = math.inf
    high: float = -math.inf

    @classmethod
    def of(cls, values: Iterable[float]) -> Moments:
        """The moments of positive finite rates (anything else is a ValueError: no log can be taken)."""
        rates = []
        for value in values:
            if not is_rate(value):
                raise ValueError(f"{value!r} is not a positive finite rate; statistics on logs need one")
            rates.append(float(value))
        if not rates:
            return cls()
        s1, s2 = _exact_sums(map(math.log, rates))
        t1, t2 = _exact_sums(rates)
        return cls(len(rates), s1, s2, t1, t2, min(rates), max(rates))

    def __add__(self, other: Moments) -> Moments:
        return Moments(self.n + other.n, self.s1 + other.s1, self.s2 + other.s2, self.t1 + other.t1,
                       self.t2 + other.t2, min(self.low, other.low), max(self.high, other.high))

    def mean_log(self) -> float:
        return float(Fraction(self.s1, 1 << SHIFT)) / self.n

    def mean(self) -> float:
        """The arithmetic mean of the rates."""
        return float(Fraction(self.t1, 1 << SHIFT)) / self.n

    def sd_log(self) -> float | None:
        """Sample standard deviation of the logs (n - 1); None below 2 values."""
        return _sd(self.n, self.s1, self.s2)

    def sd(self) -> float | None:
        """Sample standard deviation of the rates (n - 1); None below 2 values."""
        return _sd(self.n, self.t1, self.t2)

    # the text form the store keeps: the integers in hexadecimal, the extremes as floats
    def sums_text(self) -> tuple[str, str, str, str]:
        return format(self.s1, "x"), format(self.s2, "x"), format(self.t1, "x"), format(self.t2, "x")

    @classmethod
    def from_text(cls, n: int, s1: str, s2: str, t1: str, t2: str, low: float | None, high: float | None) -> Moments:
        return cls(n, int(s1, 16), int(s2, 16), int(t1, 16), int(t2, 16),
                   math.inf if low is None else low, -math.inf if high is None else high)


def _sd(n: int, s1: int, s2: int) -> float | None:
    if n < 2:
        return None
    variance = Fraction(n * s2 - s1 * s1, (n * (n - 1)) << SHIFT2)  # exact: Σ(y - ȳ)² / (n - 1)
    return math.sqrt(float(variance))


class Sample:
    """Runs' values as the store's aggregates know them: their exact moments, the aggregate groups they come
    from (`parts`) and the store (`source`, with `sample_median` and `sample_values`) that answers what moments
    cannot: the median, and a bounded list of the values themselves. Stands where compare takes a list of
    values (`len` is the number of runs)."""

    def __init__(self, moments: Moments, parts: tuple[int, ...], source: Any, median: float | None = None):
        self.moments, self.parts, self.source, self._median = moments, parts, source, median

    def __len__(self) -> int:
        return self.moments.n

    def __bool__(self) -> bool:
        return self.moments.n > 0

    def __add__(self, other: Sample) -> Sample:
        return Sample(self.moments + other.moments, self.parts + other.parts, self.source)

    def median(self) -> float:
        if self._median is None:
            self._median = self.source.sample_median(list(self.parts), self.moments.n)
        return self._median

    def some(self, limit: int) -> list[float]:
        """The values of the newest `limit` runs (all of them when there are no more)."""
        return self.source.sample_values(list(self.parts), limit)


def moments_of(values: Sequence[float] | Sample) -> Moments:
    return values.moments if isinstance(values, Sample) else Moments.of(values)


def pooled(parts: Iterable[Sequence[float] | Sample]) -> list[float] | Sample:
    """Several groups' values as one: a list where every part is one, else a Sample."""
    parts = list(parts)
    if not any(isinstance(p, Sample) for p in parts):
        return [v for p in parts for v in p]
    if not all(isinstance(p, Sample) for p in parts):
        raise ValueError("values of the store's aggregates and listed values are not pooled")
    total = parts[0]
    for p in parts[1:]:
        total = total + p
    return total
