"""The statistics behind `porter bench` and `porter regress`, as plain functions of samples.

Every method here is distribution-free, because step times are not normal (a floor, a
long right tail, bursts when a neighbour runs): the median's interval comes from order
statistics, comparisons from Mann-Whitney U and a bootstrap of the ratio of medians.
Each function's docstring is the method text the report prints beside its numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import stats as sps

from porter.core.samples import CONFIDENCE, Samples, median_ci

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20261201  # fixed: the same history always gives the same interval

MEDIAN_CI_METHOD = "95% distribution-free interval of the median (binomial order statistics)"
RATIO_CI_METHOD = ("95% percentile bootstrap of median(new)/median(baseline), 2000 resamples; the baseline "
                   "resamples whole runs first, then samples within each, so run-to-run drift widens it")
TEST_METHOD = "two-sided Mann-Whitney U on raw samples, Holm-corrected across series"


def ci_half_width(samples: Sequence[float]) -> float:
    """Half the median interval's width relative to the median (0.01 = +/- 1%)."""
    if len(samples) == 0:
        return math.inf
    lo, hi = median_ci(samples)
    med = float(np.median(samples))
    return (hi - lo) / 2 / med if med > 0 else math.inf


UNSTABLE_SPREAD = 0.30  # IQR/median: three times porter capture's "noisy" line
ADMISSION_METHOD = ("noise admission: stable when the median's 95% interval is within +/- half the practical threshold "
                    f"and IQR/median <= {UNSTABLE_SPREAD:.0%}; unstable runs never alert")


def spread(samples: Sequence[float]) -> float:
    """IQR / median (porter.core.samples.Samples's definition, as everywhere in porter)."""
    return Samples.of(samples).rel_spread


def admitted(samples: Sequence[float], threshold: float) -> bool:
    """True when the median is known well enough to resolve a threshold-sized change (ADMISSION_METHOD)."""
    return len(samples) > 0 and ci_half_width(samples) <= threshold / 2 and spread(samples) <= UNSTABLE_SPREAD


def mann_whitney_p(new: Sequence[float], base: Sequence[float]) -> float:
    """Two-sided Mann-Whitney U p-value (asymptotic with tie correction past small n)."""
    if len(new) < 2 or len(base) < 2:
        return 1.0
    return float(sps.mannwhitneyu(new, base, alternative="two-sided").pvalue)


def cross_stack_ratio_ci(new: Sequence[float], base: Sequence[float],
                         measurement: dict | None = None) -> tuple[float, float, float]:
    """(ratio, lo, hi) of two targets of one run, widened for drift between runs as the
    diagnose headline is (porter.core.stats.with_between_run): a ratio quoted for the pair must
    hold on the next run. measurement: the run's context["measurement"], whose load at the end
    picks the heavier allowance above HEAVY_LOAD x the CPUs."""
    from porter.core.stats import RatioInterval, between_run_sd, with_between_run

    ratio, lo, hi = ratio_of_medians_ci(new, [base])
    end = (measurement or {}).get("end") or {}
    sd = between_run_sd(end.get("load_average"), int(end.get("cpus") or 0))
    iv = with_between_run(RatioInterval(ratio, lo, hi, len(new), RATIO_CI_METHOD), sd)
    return iv.ratio, iv.low, iv.high


def ratio_of_medians_ci(new: Sequence[float], base_runs: Sequence[Sequence[float]],
                        resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> tuple[float, float, float]:
    """(ratio, lo, hi): median(new)/median(pooled baseline) with a percentile bootstrap interval.

    The baseline is resampled hierarchically (runs with replacement, then samples within
    each chosen run, every run weighing the same), so a history whose runs disagree gives a
    wide interval instead of a false alarm; the new run is one run, resampled within.
    """
    rng = np.random.default_rng(seed)
    new_a = np.asarray(new, dtype=float)
    runs = [np.asarray(r, dtype=float) for r in base_runs if len(r)]
    if not len(new_a) or not runs:
        return math.nan, math.nan, math.nan
    ratio = float(np.median(new_a) / np.median(np.concatenate(runs)))
    new_meds = np.median(new_a[rng.integers(0, len(new_a), size=(resamples, len(new_a)))], axis=1)
    # every run weighs the same: each resample draws len(runs) runs, then `per_run` samples from each
    per_run = int(np.median([len(r) for r in runs]))
    lengths = np.array([len(r) for r in runs])
    padded = np.zeros((len(runs), lengths.max()))
    for i, r in enumerate(runs):
        padded[i, : len(r)] = r
    chosen = rng.integers(0, len(runs), size=(resamples, len(runs), 1))
    within = (rng.random((resamples, len(runs), per_run)) * lengths[chosen]).astype(int)
    base_meds = np.median(padded[chosen, within].reshape(resamples, -1), axis=1)
    ratios = new_meds / base_meds
    alpha = 1 - CONFIDENCE
    lo, hi = np.quantile(ratios, [alpha / 2, 1 - alpha / 2])
    return ratio, float(lo), float(hi)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values (family-wise error control across series)."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


@dataclass(frozen=True)
class ChangePoint:
    index: int  # position in the history of the first run after the step
    ratio: float  # median of the runs after / median of the runs before (segment medians)
    p: float  # Mann-Whitney U between the two segments' run medians


CHANGE_POINT_METHOD = ("binary segmentation of per-run log medians (least squares, segments of >= 2 runs); a split is kept "
                       "when the step is beyond the practical threshold and Mann-Whitney U between segment run medians has p < 0.05")


def change_points(run_medians: Sequence[float], threshold: float, min_size: int = 2, alpha: float = 0.05) -> list[ChangePoint]:
    """Steps in a series of per-run medians (see CHANGE_POINT_METHOD), in history order."""
    y = np.log(np.asarray(run_medians, dtype=float))
    found: list[ChangePoint] = []

    def split(a: int, b: int) -> None:
        seg = y[a:b]
        if len(seg) < 2 * min_size:
            return
        best, best_cost = -1, math.inf
        for k in range(min_size, len(seg) - min_size + 1):
            cost = float(((seg[:k] - seg[:k].mean()) ** 2).sum() + ((seg[k:] - seg[k:].mean()) ** 2).sum())
            if cost < best_cost:
                best, best_cost = k, cost
        left, right = seg[:best], seg[best:]
        ratio = float(math.exp(np.median(right) - np.median(left)))
        p = float(sps.mannwhitneyu(right, left, alternative="two-sided").pvalue)
        if abs(ratio - 1) >= threshold and p < alpha:
            found.append(ChangePoint(a + best, ratio, p))
            split(a, a + best)
            split(a + best, b)

    split(0, len(y))
    return sorted(found, key=lambda c: c.index)


__all__ = [
    "ADMISSION_METHOD", "CHANGE_POINT_METHOD", "admitted", "spread", "CONFIDENCE", "MEDIAN_CI_METHOD", "RATIO_CI_METHOD", "TEST_METHOD", "ChangePoint",
    "change_points", "ci_half_width", "cross_stack_ratio_ci", "holm", "mann_whitney_p", "median_ci", "ratio_of_medians_ci",
]
