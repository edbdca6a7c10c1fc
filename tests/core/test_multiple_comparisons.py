"""The p-value of "ratio 1" that porter.core.stats.paired_ratio gives beside its interval, and
Holm's correction over a family of them (what `porter tune` keeps when it tries many recipes)."""

from __future__ import annotations

import numpy as np

from porter.core.stats import holm, paired_ratio


def _pair(rng: np.random.Generator, ratio: float, n: int = 60) -> tuple[np.ndarray, np.ndarray]:
    base = rng.lognormal(np.log(2e-3), 0.3, n)
    return base * rng.lognormal(0, 0.05, n), ratio * base * rng.lognormal(0, 0.05, n)


def test_the_p_value_agrees_with_the_interval_on_whether_one_is_excluded():
    """p < 0.05 exactly when the 95% interval leaves 1 out (both from the same bootstrap
    medians and chunks), over effects from none to clear: 120 seeded runs, agreement in all but
    the runs whose interval ends within 0.2% of 1 (percentile interpolation at the edge)."""
    rng = np.random.default_rng(11)
    disagree = edge = 0
    for k in range(120):
        ratio = (1.0, 1.01, 1.02, 1.04)[k % 4]
        iv = paired_ratio(*_pair(rng, ratio), resamples=500, seed=k)
        excluded = iv.low > 1 or iv.high < 1
        near = min(abs(iv.low - 1), abs(iv.high - 1)) < 2e-3
        if excluded != (iv.p_unity < 0.05):
            disagree += 1
            edge += near
    assert disagree == edge, (disagree, edge)


def test_under_no_effect_the_p_values_are_not_small_more_often_than_their_level():
    """200 seeded runs of two identical sides: p < 0.05 in at most ~8% (the binomial 99th
    percentile at 5% of 200 is 9%); a p-value that ignored the drift widening would say more."""
    rng = np.random.default_rng(5)
    small = sum(paired_ratio(*_pair(rng, 1.0), resamples=500, seed=k).p_unity < 0.05 for k in range(200))
    assert small <= 18, small


def test_a_clear_effect_gets_a_small_p_value():
    rng = np.random.default_rng(2)
    iv = paired_ratio(*_pair(rng, 0.8), resamples=2000)
    assert iv.p_unity <= 0.002 and iv.high < 1


def test_holm_steps_down_and_stops_at_the_first_that_fails():
    # sorted: 0.005 <= 0.05/4, 0.01 <= 0.05/3, 0.03 > 0.05/2 stops (0.04 is not reached)
    assert holm([0.01, 0.04, 0.03, 0.005]) == [True, False, False, True]
    assert holm([0.02, 0.02]) == [True, True]  # 0.02 <= 0.025, then 0.02 <= 0.05
    assert holm([0.03, float("nan")]) == [False, False]  # NaN counts in m and is never rejected
    assert holm([]) == []


def test_holm_keeps_the_family_error_at_its_level_where_a_per_test_rule_does_not():
    """Eight recipes that change nothing, 150 seeded tunes: the uncorrected rule keeps at
    least one in about a third of them (1 - 0.95^8 = 34%); Holm in at most ~8%."""
    rng = np.random.default_rng(9)
    any_plain = any_holm = 0
    for k in range(150):
        ps = [paired_ratio(*_pair(rng, 1.0, 40), resamples=400, seed=1000 * k + j).p_unity for j in range(8)]
        any_plain += any(p < 0.05 for p in ps)
        any_holm += any(holm(ps))
    assert any_plain >= 30 and any_holm <= 12, (any_plain, any_holm)
