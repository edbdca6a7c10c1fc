"""Repeated measurements of one quantity, and the few statistics every reader of them needs.

One type for every place porter holds repeats (a live capture's step times, a trace's
per-step totals, a bench case's samples), so that "median", "IQR" and "noisy" mean one
thing across the diagnosis, the capture manifest and `porter bench`: the IQR is NumPy's
linear-interpolation quartiles, and a spread (IQR over median) above NOISY_SPREAD is noisy.
The ratio of two runs is porter.core.stats's job (paired and unpaired intervals).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

NOISY_SPREAD = 0.10  # IQR / median above this: the median is not trustworthy to ~10%
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Samples:
    samples: tuple[float, ...]

    @classmethod
    def of(cls, values: Sequence[float]) -> Samples:
        return cls(tuple(float(v) for v in values))

    @property
    def n(self) -> int:
        return len(self.samples)

    @property
    def median(self) -> float:
        return float(np.median(self.samples)) if self.samples else float("nan")

    @property
    def iqr(self) -> float:
        if not self.samples:
            return float("nan")
        q1, q3 = np.percentile(self.samples, [25, 75])
        return float(q3 - q1)

    @property
    def rel_spread(self) -> float:
        """IQR over median: above NOISY_SPREAD the samples are too noisy to rank small gaps."""
        m = self.median
        return self.iqr / m if m and m == m else float("nan")

    @property
    def noisy(self) -> bool:
        return self.rel_spread > NOISY_SPREAD

    def median_ci(self, confidence: float = CONFIDENCE) -> tuple[float, float]:
        return median_ci(self.samples, confidence)

    def to_dict(self) -> dict[str, Any]:
        s = self.samples
        return {"n": self.n, "median": self.median, "min": float(min(s)) if s else None,
                "max": float(max(s)) if s else None, "iqr": self.iqr, "rel_spread": self.rel_spread,
                "samples": [float(x) for x in s]}


def median_ci(samples: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Order-statistic interval for the median: ranks where Binomial(n, 1/2) leaves alpha/2 each side."""
    from scipy import stats as sps  # only where an interval is asked for (~0.3 s to import)

    x = np.sort(np.asarray(samples, dtype=float))
    n = len(x)
    if n == 0:
        return math.nan, math.nan
    if n < 6:  # too few for a 95% order-statistic interval: the range is the honest answer
        return float(x[0]), float(x[-1])
    alpha = 1 - confidence
    lo = int(sps.binom.ppf(alpha / 2, n, 0.5))  # 0-based rank of the lower bound
    hi = n - 1 - lo
    return float(x[max(lo - 1, 0)]), float(x[min(hi + 1, n - 1)])
