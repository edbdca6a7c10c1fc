"""Wall-clock step timing kept apart from profiling, with every sample stored.

Like torch.utils.benchmark's Measurement: the raw samples are the record; median,
IQR and the noise verdict are derived from them.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

NOISY_SPREAD = 0.10  # IQR / median above this: the median is not trustworthy to ~10%


@dataclass
class Timing:
    samples_s: list[float] = field(default_factory=list)

    @property
    def median_s(self) -> float:
        return statistics.median(self.samples_s) if self.samples_s else float("nan")

    @property
    def iqr_s(self) -> float:
        if len(self.samples_s) < 4:
            return max(self.samples_s) - min(self.samples_s) if self.samples_s else float("nan")
        q = statistics.quantiles(self.samples_s, n=4)
        return q[2] - q[0]

    @property
    def spread(self) -> float:
        """IQR relative to the median."""
        m = self.median_s
        return self.iqr_s / m if m and m == m else float("nan")

    @property
    def noisy(self) -> bool:
        return self.spread > NOISY_SPREAD

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "median_s": self.median_s,
            "iqr_s": self.iqr_s,
            "spread": self.spread,
            "min_s": min(self.samples_s) if self.samples_s else float("nan"),
            "max_s": max(self.samples_s) if self.samples_s else float("nan"),
            "noisy": self.noisy,
        }


def timed_call(step: Callable[[], Any]) -> tuple[float, float]:
    """(wall, process CPU) seconds of one call: a live pair's headline and its profiled steps
    are read on either clock (porter.capture.interleaved, porter.analysis.headline)."""
    w0, c0 = time.perf_counter(), time.process_time()
    step()
    return time.perf_counter() - w0, time.process_time() - c0


def time_steps(step: Callable[[], Any], warmup: int, repeats: int) -> Timing:
    """Run step warmup times untimed, then time repeats calls (step must synchronise)."""
    for _ in range(warmup):
        step()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        samples.append(time.perf_counter() - t0)
    return Timing(samples)
