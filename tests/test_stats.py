"""Statistics on repeats, checked against SciPy.

Every expected number below was computed once with SciPy 1.17.1 / NumPy 2.4.6 (Python 3.11, 2026-11-23):
`scipy.stats.t.ppf(0.975, df)`, `scipy.stats.t.cdf`, `scipy.special.betainc`,
`scipy.stats.ttest_ind(x, y, equal_var=False)` with `.df` and `.confidence_interval(0.95)`, and
`scipy.stats.t.interval(0.95, n - 1, loc=mean, scale=scipy.stats.sem(x))`. dlrun does not depend on SciPy.
"""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlrun.results import stats

# Throughput-like repeats (img/s): A a baseline, B about 4 % slower, C the same as A; D and E unequal in
# size and spread.
A = [208.1, 205.3, 210.4, 207.7, 206.9]
B = [199.2, 201.5, 197.8, 200.9, 198.4]
C = [207.0, 211.2, 204.9, 209.8, 206.1]
D = [10.1, 12.3, 9.8]
E = [11.5, 11.9, 12.2, 11.7, 12.0, 11.8]

T_975 = {1: 12.7062047362, 2: 4.30265272975, 3: 3.18244630528, 4: 2.7764451052, 5: 2.57058183564,
         9: 2.2621571628, 10: 2.22813885199, 30: 2.0422724563, 2.5: 3.574654842, 7.3: 2.34506673655,
         100: 1.98397151852, 1000: 1.96233908083}


@pytest.mark.parametrize("dof, expected", sorted(T_975.items()))
def test_t_quantile_matches_scipy(dof, expected):
    assert stats.t_quantile(0.975, dof) == pytest.approx(expected, rel=1e-10)
    assert stats.t_quantile(0.025, dof) == pytest.approx(-expected, rel=1e-10)


@pytest.mark.parametrize("t, dof, expected", [(1.0, 1, 0.75), (2.0, 3, 0.930337015721),
                                              (-1.5, 7.3, 0.0877815464015), (0.3, 25, 0.616671253173)])
def test_t_cdf_matches_scipy(t, dof, expected):
    assert stats.t_cdf(t, dof) == pytest.approx(expected, rel=1e-10)


@pytest.mark.parametrize("a, b, x, expected", [(2.0, 3.0, 0.5, 0.6875), (0.5, 0.5, 0.2, 0.295167235301),
                                               (10.0, 0.5, 0.9, 0.151640909635), (15.0, 0.5, 0.3, 2.445601037e-09)])
def test_regularized_incomplete_beta_matches_scipy(a, b, x, expected):
    assert stats.betainc(a, b, x) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("values, mean, sd, median, low, high", [
    (A, 207.68, 1.86064504944, 207.7, 205.369704029, 209.990295971),
    (B, 199.56, 1.59154013459, 199.2, 197.583841913, 201.536158087),
    (D, 10.7333333333, 1.36503968196, 10.1, 7.34238678133, 14.1242798853),
    (E, 11.85, 0.24289915603, 11.85, 11.5950929688, 12.1049070312),
])
def test_summary_and_95_percent_interval_match_scipy(values, mean, sd, median, low, high):
    s = stats.summarize(values)
    assert (s.n, s.min, s.max) == (len(values), min(values), max(values))
    assert s.mean == pytest.approx(mean, rel=1e-10) and s.stdev == pytest.approx(sd, rel=1e-10)
    assert s.median == pytest.approx(median, rel=1e-12)
    assert (s.ci_low, s.ci_high) == (pytest.approx(low, rel=1e-10), pytest.approx(high, rel=1e-10))


def test_one_run_has_no_spread_and_no_interval():
    s = stats.summarize([42.0])
    assert (s.n, s.mean, s.median, s.stdev, s.ci_low, s.ci_high) == (1, 42.0, 42.0, None, None, None)


@pytest.mark.parametrize("base, other, t, p, dof, low, high", [
    (A, B, -7.41560242323, 8.48257144951e-05, 7.8123980214, -10.6556415626, -5.58435843738),
    (A, C, 0.0834581954509, 0.935756172179, 7.21361290545, -3.25966075203, 3.49966075203),
    (D, E, 1.40581441431, 0.29143224845, 2.06362176834, -2.20200342511, 4.43533675844),
])
def test_welch_matches_scipy(base, other, t, p, dof, low, high):
    w = stats.welch(base, other)
    assert w.t == pytest.approx(t, rel=1e-9) and w.p_value == pytest.approx(p, rel=1e-8)
    assert w.dof == pytest.approx(dof, rel=1e-10)
    assert (w.diff_low, w.diff_high) == (pytest.approx(low, rel=1e-9), pytest.approx(high, rel=1e-9))


def test_verdict_sentences():
    slower, test = stats.verdict(A, B)
    # diff -8.12 of mean 207.68 = -3.91 %; Welch CI (-10.656, -5.584) / 207.68 = 5.13 % .. 2.69 %
    assert slower == "slower by 3.9 % (95 % CI 2.7–5.1 %, p = 8.5e-05)" and test.p_value < 0.05
    assert stats.verdict(B, A)[0].startswith("faster by 4.1 % (95 % CI 2.8–5.3 %")
    assert stats.verdict(A, C)[0] == "no significant difference (p = 0.94)"
    assert stats.verdict([1.0], A) == ("not tested: needs at least 2 runs on each side (have 1 and 5)", None)


def test_identical_repeats_give_an_exact_answer_not_a_division_by_zero():
    w = stats.welch([5.0, 5.0, 5.0], [4.0, 4.0])
    assert (w.p_value, w.diff, w.diff_low, w.diff_high, w.t) == (0.0, -1.0, -1.0, -1.0, -math.inf)
    assert stats.welch([5.0, 5.0], [5.0, 5.0]).p_value == 1.0


def test_bootstrap_ratio_interval_is_seeded_and_brackets_the_ratio():
    first = stats.ratio_interval(A, B)
    assert first == stats.ratio_interval(A, B)  # same runs, same interval
    assert first.method == "bootstrap" and first.ratio == pytest.approx(199.56 / 207.68)
    assert first.low < first.ratio < first.high
    # the delta-method interval of the same ratio (0.9508 .. 0.9710) and the bootstrap agree to ~0.002
    delta = stats._delta_interval(A, B, 0.95)
    assert delta.method == "delta" and abs(first.low - delta.low) < 0.003 and abs(first.high - delta.high) < 0.003
    assert stats.ratio_interval([2.0], [3.0]) == stats.RatioInterval(1.5, None, None, "none")


def test_large_samples_switch_to_the_delta_method():
    many = [100.0 + (i % 7) for i in range(60)]
    assert stats.ratio_interval(many, many).method == "delta"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=1.0, max_value=1e6), min_size=2, max_size=30))
def test_interval_contains_the_mean_and_median_lies_between_min_and_max(values):
    s = stats.summarize(values)
    assert s.min <= s.median <= s.max
    assert s.ci_low <= s.mean <= s.ci_high


@settings(max_examples=100, deadline=None)
@given(st.floats(min_value=0.5, max_value=200.0), st.floats(min_value=0.001, max_value=0.999))
def test_t_quantile_inverts_the_cdf(dof, p):
    assert stats.t_cdf(stats.t_quantile(p, dof), dof) == pytest.approx(p, abs=1e-9)
