"""A ratio of two timings with an honest interval: median of paired ratios, bootstrap 95% CI.

Why paired ratios: source and target forwards timed alternately share the machine's
conditions (another process, a frequency change), so each pair's ratio cancels what both
saw; the median of those ratios resists the occasional stalled sample. The interval is a
percentile bootstrap of that median, resampling runs of consecutive pairs (a moving-block
bootstrap: load drifts over many pairs), seeded so one set of samples always gives one
interval. Load on a shared machine also drifts over seconds, longer than any block a
10-second run can resample (BENCHMARKS.md, "Lab notes: interval width"); so the interval is widened to at least a batch-means
interval over CHUNKS equal-time chunks of the run (the standard interval for autocorrelated
simulation output), which sees drift on the scale of the whole run. Unpaired samples
(profiled steps of two recorded traces) resample each side on its own and take the ratio
of medians; with fewer than SMALL_N samples a side, where a bootstrap of a median can only
recombine a handful of values (five identical-looking steps gave x0.806-x0.806), the
interval is the ratio's range over each median's distribution-free 95% interval
(order_statistic_ratio), which is conservative. A live ratio quoted as the pair's (the
headline, a tune's ratio of the source) is then widened for the drift between runs minutes
apart that no single run sees (with_between_run).

Torch-free and stateless: capture's adaptive loop and diagnose's trace mode both use it.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from typing import Any, Sequence

import numpy as np

from porter.core.samples import median_ci

CONFIDENCE = 0.95
BOOTSTRAP = 2000  # resamples: the 2.5/97.5% percentiles move < 1% of the width beyond this
SEED = 0
WIDE = 0.10  # an interval reaching further than +-10% of the ratio is too wide to plan on
# wall-time chunks of the batch-means interval (4 degrees of freedom). Chosen on CPU-time recordings of
# the demo beside busy loops (60 s and 180 s) cut into consecutive 10 s runs: three consecutive
# intervals overlapped in 16 of 17 triples with 5 chunks, 13 of 17 with 8, 7 of 17 with none
CHUNKS = 5
MIN_CHUNK = 3  # ratios per chunk, fewest; runs with under 4 chunks' worth get the bootstrap alone
# Student's t, 97.5% point, by degrees of freedom (a two-sided 95% interval from 3-7 chunk means)
# relative sd of a live ratio between runs minutes apart on one machine, beyond its within-run
# interval (with_between_run); calibrated in BENCHMARKS.md, "Headline intervals across runs"
BETWEEN_RUN_SD = 0.025
# the same when the load exceeded HEAVY_LOAD times the CPUs: the ratio then moves with the load
# itself (at load 6.7-16 on 2 CPUs runs minutes apart differed by 5-12%; at 1-5.7, by 1.6% at most)
HEAVY_LOAD = 3.0
OVERSUBSCRIBED_SD = 0.05
SMALL_N = 20  # fewer samples a side than this: order statistics, not a bootstrap (unpaired)
T975 = {2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365}


@dataclass(frozen=True)
class RatioInterval:
    """target/source ratio (> 1: the target is slower), its 95% interval, and how it was had."""

    ratio: float
    low: float
    high: float
    n: int  # pairs (paired) or the smaller side's sample count (unpaired)
    method: str
    p_unity: float = float("nan")  # two-sided p-value of "the ratio is 1", where the method gives one
    within_run: tuple[float, float] | None = None  # the interval before with_between_run widened it
    between_run_sd: float = 0.0  # the relative between-run sd that widening allowed for

    @property
    def half_width(self) -> float:
        """The interval's larger reach from the ratio, relative to the ratio (0.05 = +-5%)."""
        if not (self.ratio > 0 and np.isfinite(self.low) and np.isfinite(self.high)):
            return float("nan")
        return max(self.ratio - self.low, self.high - self.ratio) / self.ratio

    @property
    def wide(self) -> bool:
        """True when the interval is wider than +-WIDE or unknown (too few samples)."""
        hw = self.half_width
        return not (hw == hw) or hw > WIDE

    def to_dict(self) -> dict[str, Any]:
        out = {"ratio": self.ratio, "ci95": [self.low, self.high], "half_width": self.half_width,
               "wide": self.wide, "n": self.n, "method": self.method}
        if self.within_run is not None:
            out["within_run_ci95"] = list(self.within_run)
            out["between_run_sd"] = self.between_run_sd
        return out


def between_run_sd(load: float | None = None, cpus: int = 0) -> float:
    """The relative sd between runs that a live ratio's interval allows for: BETWEEN_RUN_SD, or
    OVERSUBSCRIBED_SD when the 1-minute load average exceeded HEAVY_LOAD times the CPUs (None or
    no CPU count: unknown, the plain one); PORTER_BETWEEN_RUN_SD sets it (0: the within-run
    interval alone)."""
    heavy = isinstance(load, (int, float)) and cpus > 0 and load > HEAVY_LOAD * cpus
    default = OVERSUBSCRIBED_SD if heavy else BETWEEN_RUN_SD
    text = os.environ.get("PORTER_BETWEEN_RUN_SD", "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        return default
    return value if value >= 0 and math.isfinite(value) else default


def with_between_run(iv: RatioInterval, sd: float) -> RatioInterval:
    """iv widened for drift between runs: each side's reach, in log ratio, combined in quadrature
    with z * sd. Within one run the pairs share the machine's state; the next run, minutes later,
    does not (other jobs, the busy sibling core, frequency, memory placement), so a within-run
    interval is too narrow for the next run to land in. sd = 0 or an interval without bounds
    returns iv unchanged."""
    if not (sd > 0 and iv.ratio > 0 and iv.low > 0 and np.isfinite(iv.low) and np.isfinite(iv.high)):
        return iv
    z = 1.959964
    lr = math.log(iv.ratio)
    reach_lo = math.hypot(lr - math.log(iv.low), z * sd)
    reach_hi = math.hypot(math.log(iv.high) - lr, z * sd)
    return replace(iv, low=math.exp(lr - reach_lo), high=math.exp(lr + reach_hi),
                   method=f"{iv.method}; widened for drift between runs (sd {100 * sd:.1f}%)",
                   within_run=(iv.low, iv.high), between_run_sd=sd)


def _percentiles(values: np.ndarray) -> tuple[float, float]:
    a = (1 - CONFIDENCE) / 2
    lo, hi = np.percentile(values, [100 * a, 100 * (1 - a)])
    return float(lo), float(hi)


def ab_ba_blocks(source_s: Sequence[float], target_s: Sequence[float]) -> tuple[list[float], list[float]]:
    """Each side summed over blocks of two consecutive pairs (A B then B A); a last odd pair is left out.

    Whichever side runs second in a pair tends to be faster (warm caches); a block holds
    both orders, so its ratio carries no such advantage.
    """
    n = min(len(source_s), len(target_s)) // 2 * 2
    return ([source_s[i] + source_s[i + 1] for i in range(0, n, 2)],
            [target_s[i] + target_s[i + 1] for i in range(0, n, 2)])


def block_length(ratios: np.ndarray) -> int:
    """Moving-block length for serially ordered ratios: n^(1/3) (the order Hall, Horowitz and
    Jing 1995 give for a percentile), stretched by the AR(1) factor (2 rho / (1 - rho^2))^(2/3)
    when the log ratios' lag-1 autocorrelation rho says load drifts over many pairs;
    between 1 and n/4."""
    x = np.log(ratios)
    x = x - x.mean()
    n, ss = x.size, float(np.dot(x, x))
    rho = min(max(float(np.dot(x[1:], x[:-1])) / ss, 0.0), 0.95) if ss > 0 else 0.0
    stretch = max((2 * rho / (1 - rho * rho)) ** (2 / 3), 1.0)
    return int(min(max(1, round(n ** (1 / 3) * stretch)), max(n // 4, 1)))


def block_indices(rng: np.random.Generator, n: int, resamples: int, length: int) -> np.ndarray:
    """(resamples, n) indices of a circular moving-block bootstrap: runs of `length`
    consecutive samples from random starts, wrapping at the end."""
    blocks = -(-n // length)
    starts = rng.integers(0, n, size=(resamples, blocks))
    idx = (starts[:, :, None] + np.arange(length)) % n
    return idx.reshape(resamples, blocks * length)[:, :n]


def _chunk_log_medians(ratios: np.ndarray, seconds: np.ndarray, chunks: int) -> np.ndarray | None:
    """The median log ratio of each of `chunks` consecutive equal-time chunks; None for a run
    too short for 4 chunks of MIN_CHUNK ratios."""
    k = min(chunks, ratios.size // MIN_CHUNK)
    if k < 4:
        return None
    edges = np.cumsum(seconds) / seconds.sum() * k
    which = np.minimum(edges.astype(int), k - 1)
    logs = np.log(ratios)
    means = np.array([np.median(logs[which == j]) for j in range(k) if np.count_nonzero(which == j)])
    return means if means.size >= 4 else None


def batch_means(ratios: np.ndarray, seconds: np.ndarray, chunks: int = CHUNKS) -> tuple[float, float] | None:
    """95% interval for the run's central log ratio from the medians of `chunks` consecutive
    chunks of equal time (seconds: each ratio's duration on the headline's clock, which is
    wall time or, for two single-threaded CPU stacks, about it), centred on the overall median.

    Chunks whose medians differ by more than their own noise say the machine changed speed
    during the run; their spread, not the pairs', then sets the width. None when the run is
    too short for 4 chunks of MIN_CHUNK ratios.
    """
    means = _chunk_log_medians(ratios, seconds, chunks)
    if means is None:
        return None
    logs = np.log(ratios)
    t = T975[min(means.size - 1, max(T975))]  # beyond the table, its last (larger) point: a little wider
    half = t * float(np.std(means, ddof=1)) / np.sqrt(means.size)
    centre = float(np.median(logs))
    return float(np.exp(centre - half)), float(np.exp(centre + half))


def paired_ratio(source_s: Sequence[float], target_s: Sequence[float], *, resamples: int = BOOTSTRAP,
                 seed: int = SEED, block: int | None = None, chunks: int = CHUNKS) -> RatioInterval:
    """Median of target_i / source_i over pairs i (in time order), with a moving-block
    bootstrap 95% interval.

    Pairs taken seconds apart are not independent: another process's load comes and goes
    over many pairs, so neighbouring ratios move together (a run's thirds can differ by
    tens of percent beside a busy loop). Resampling single
    pairs would treat that drift as independent noise and give an interval too narrow for
    the next run to land in; resampling runs of block_length() consecutive pairs keeps it.
    On independent pairs the interval is the plain bootstrap's, give or take. block: a fixed
    block length (1: the plain bootstrap), else automatic. The interval is then widened to
    cover batch_means() over `chunks` wall-time chunks (0: the bootstrap alone), for drift
    slower than any block.
    """
    s = np.asarray(source_s, dtype=np.float64)
    t = np.asarray(target_s, dtype=np.float64)
    if s.shape != t.shape:
        raise ValueError(f"paired samples differ in length: {s.size} source, {t.size} target")
    ok = (s > 0) & np.isfinite(s) & np.isfinite(t)
    r = t[ok] / s[ok]
    if r.size == 0:
        return RatioInterval(float("nan"), float("nan"), float("nan"), 0, "paired median ratio")
    if r.size < 3:
        return RatioInterval(float(np.median(r)), float("nan"), float("nan"), int(r.size), "paired median ratio")
    rng = np.random.default_rng(seed)
    idx = block_indices(rng, r.size, resamples, block or block_length(r))
    medians = np.median(r[idx], axis=1)
    lo, hi = _percentiles(medians)
    p = _bootstrap_p(medians)
    method = "paired median ratio, moving-block bootstrap 95%"
    drift = batch_means(r, (s + t)[ok], chunks) if chunks else None
    if drift is not None:
        lo, hi = min(lo, drift[0]), max(hi, drift[1])
        p = max(p, batch_means_p(r, (s + t)[ok], chunks))
        method += f", widened to {chunks}-chunk batch means"
    return RatioInterval(float(np.median(r)), lo, hi, int(r.size), method, p)


def _bootstrap_p(medians: np.ndarray) -> float:
    """Two-sided p-value of ratio 1 from the bootstrap medians: twice the smaller tail at 1
    (the percentile interval at level 1 - p just reaches 1), at least 1/resamples."""
    tail = min(np.count_nonzero(medians >= 1.0), np.count_nonzero(medians <= 1.0)) / medians.size
    return float(min(1.0, max(2 * tail, 1.0 / medians.size)))


def batch_means_p(ratios: np.ndarray, seconds: np.ndarray, chunks: int = CHUNKS) -> float:
    """Two-sided p-value of ratio 1 from batch_means()'s chunks (Student's t on the chunk
    medians' log, centred as batch_means is); 0 when the run is too short for chunks (the
    bootstrap's p then stands alone)."""
    from scipy.stats import t as student_t

    means = _chunk_log_medians(ratios, seconds, chunks)
    if means is None:
        return 0.0
    se = float(np.std(means, ddof=1)) / np.sqrt(means.size)
    centre = float(np.median(np.log(ratios)))
    if se == 0:
        return 0.0 if centre != 0 else 1.0
    return float(2 * student_t.sf(abs(centre) / se, means.size - 1))


def holm(p_values: Sequence[float], alpha: float = 1 - CONFIDENCE) -> list[bool]:
    """Holm's step-down over a family of tests: which hypotheses are rejected with the family's
    chance of any false rejection at most alpha. Sorted by p, the i-th smallest (from 0) must be
    at most alpha / (m - i), and the first that is not stops the rest; NaN is never rejected."""
    order = sorted(range(len(p_values)), key=lambda i: (not p_values[i] == p_values[i], p_values[i]))
    out = [False] * len(p_values)
    m = len(p_values)
    for rank, i in enumerate(order):
        p = p_values[i]
        if not (p == p and p <= alpha / (m - rank)):
            break
        out[i] = True
    return out


def _unpaired(source: Sequence[float], target: Sequence[float]) -> tuple[np.ndarray, np.ndarray, int, RatioInterval | None]:
    """The finite samples of each side, the smaller count, and the answer when no interval can
    be had (no samples, a zero median, or under 3 a side)."""
    s = np.asarray([x for x in source if np.isfinite(x)], dtype=np.float64)
    t = np.asarray([x for x in target if np.isfinite(x)], dtype=np.float64)
    n = int(min(s.size, t.size))
    if n == 0 or np.median(s) <= 0:
        return s, t, n, RatioInterval(float("nan"), float("nan"), float("nan"), n, "ratio of medians")
    if n < 3:
        return s, t, n, RatioInterval(float(np.median(t) / np.median(s)), float("nan"), float("nan"), n,
                                      "ratio of medians")
    return s, t, n, None


def unpaired_ratio(source: Sequence[float], target: Sequence[float], *, resamples: int = BOOTSTRAP,
                   seed: int = SEED) -> RatioInterval:
    """median(target) / median(source), each side resampled on its own for the 95% interval."""
    s, t, n, bare = _unpaired(source, target)
    if bare is not None:
        return bare
    ratio = float(np.median(t) / np.median(s))
    rng = np.random.default_rng(seed)
    ms = np.median(s[rng.integers(0, s.size, size=(resamples, s.size))], axis=1)
    mt = np.median(t[rng.integers(0, t.size, size=(resamples, t.size))], axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        lo, hi = _percentiles(mt / ms)
    return RatioInterval(ratio, lo, hi, n, "ratio of medians, bootstrap 95%")


def order_statistic_ratio(source: Sequence[float], target: Sequence[float]) -> RatioInterval:
    """median(target) / median(source) over [low_t / high_s, high_t / low_s], each bound from its
    side's order-statistic 95% interval of the median (the range below six samples, which holds
    the median 94-97% of the time): both intervals hold with >= 90% probability, and the ratio's
    range over them is wider than the joint region, so the stated interval errs wide."""
    s, t, n, bare = _unpaired(source, target)
    if bare is not None:
        return bare
    ratio = float(np.median(t) / np.median(s))
    (s_lo, s_hi), (t_lo, t_hi) = median_ci(s), median_ci(t)
    lo = t_lo / s_hi if s_hi > 0 else float("nan")
    hi = t_hi / s_lo if s_lo > 0 else float("inf")
    return RatioInterval(ratio, min(lo, ratio), max(hi, ratio), n,
                         "ratio of medians, each side's order-statistic 95% interval (few samples)")


def few_sample_ratio(source: Sequence[float], target: Sequence[float]) -> RatioInterval:
    """unpaired_ratio, or order_statistic_ratio below SMALL_N samples on either side."""
    if min(len(source), len(target)) < SMALL_N:
        return order_statistic_ratio(source, target)
    return unpaired_ratio(source, target)

