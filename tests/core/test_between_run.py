"""The between-run widening of a live ratio's interval (porter.core.stats.with_between_run)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from porter.core.stats import RatioInterval, ab_ba_blocks, between_run_sd, paired_ratio, with_between_run


def test_widening_adds_in_quadrature_in_log_ratio_and_keeps_the_within_run_interval():
    iv = RatioInterval(0.8, 0.8 * math.exp(-0.01), 0.8 * math.exp(0.02), 40, "paired median ratio")
    wide = with_between_run(iv, 0.025)
    z = 1.959964
    assert math.log(0.8 / wide.low) == pytest.approx(math.hypot(0.01, z * 0.025))
    assert math.log(wide.high / 0.8) == pytest.approx(math.hypot(0.02, z * 0.025))
    assert wide.within_run == (iv.low, iv.high) and wide.ratio == iv.ratio and wide.n == 40
    assert "drift between runs (sd 2.5%)" in wide.method
    d = wide.to_dict()
    assert d["within_run_ci95"] == [iv.low, iv.high] and d["between_run_sd"] == 0.025
    assert with_between_run(iv, 0.0) is iv and "within_run_ci95" not in iv.to_dict()
    nan = RatioInterval(0.8, float("nan"), float("nan"), 2, "too few")
    assert with_between_run(nan, 0.025) is nan


def test_the_sd_comes_from_the_environment_when_set(monkeypatch):
    monkeypatch.setenv("PORTER_BETWEEN_RUN_SD", "0")
    assert between_run_sd() == 0.0
    monkeypatch.setenv("PORTER_BETWEEN_RUN_SD", "0.04")
    assert between_run_sd() == 0.04
    assert between_run_sd(7.0, 2) == 0.04  # the environment's word is the last
    monkeypatch.setenv("PORTER_BETWEEN_RUN_SD", "lots")
    from porter.core.stats import BETWEEN_RUN_SD, OVERSUBSCRIBED_SD

    assert between_run_sd() == BETWEEN_RUN_SD and between_run_sd(7.0, 2) == OVERSUBSCRIBED_SD > BETWEEN_RUN_SD
    assert between_run_sd(5.9, 2) == BETWEEN_RUN_SD == between_run_sd(7.0, 0)  # 3x the CPUs, or unknown CPUs


def test_simulated_drift_between_runs_is_covered():
    """Runs whose true ratio moves by 2% (lognormal) between runs, 60 noisy pairs each: the next
    run's figure falls in this run's widened interval about 90% of the time, in the within-run
    interval far less often."""
    rng = np.random.default_rng(7)
    sd_true, runs = 0.02, 160

    def one_run() -> RatioInterval:
        true = 0.7 * math.exp(rng.normal(0, sd_true))
        source = rng.lognormal(math.log(0.010), 0.05, 120)
        target = source * true * rng.lognormal(0, 0.03, 120)
        return paired_ratio(*ab_ba_blocks(list(source), list(target)), resamples=400, chunks=0)

    ivs = [one_run() for _ in range(runs + 1)]
    plain = sum(a.low <= b.ratio <= a.high for a, b in zip(ivs, ivs[1:])) / runs
    widened = [with_between_run(iv, 0.025) for iv in ivs]
    held = sum(a.low <= b.ratio <= a.high for a, b in zip(widened, ivs[1:])) / runs
    print(f"next run covered: within-run {plain:.0%}, widened {held:.0%}")
    assert plain < 0.5 and held >= 0.85, (plain, held)


def test_bench_cross_stack_ratio_is_widened_as_the_headline_is():
    from porter.bench.stats import cross_stack_ratio_ci, ratio_of_medians_ci

    rng = np.random.default_rng(3)
    eager = list(rng.lognormal(math.log(0.010), 0.02, 40))
    xla = list(rng.lognormal(math.log(0.007), 0.02, 40))
    r, lo, hi = ratio_of_medians_ci(xla, [eager])
    r2, lo2, hi2 = cross_stack_ratio_ci(xla, eager, {"end": {"load_average": 1.0, "cpus": 2}})
    r3, lo3, hi3 = cross_stack_ratio_ci(xla, eager, {"end": {"load_average": 7.0, "cpus": 2}})
    assert r == r2 == r3
    assert lo3 < lo2 < lo and hi < hi2 < hi3
    assert math.log(r2 / lo2) == pytest.approx(math.hypot(math.log(r / lo), 1.959964 * 0.025))
