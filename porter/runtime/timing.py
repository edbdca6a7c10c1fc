"""Wall-clock step timing kept apart from profiling, with every sample stored.

Like torch.utils.benchmark's Measurement: the raw samples are the record; median,
IQR and the noise verdict are derived from them.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from porter.core.samples import Samples


@dataclass
class Timing:
    """A capture's step times in seconds (the manifest's record); the statistics are
    porter.core.samples.Samples's, so "noisy" means what it means in the diagnosis."""

    samples_s: list[float] = field(default_factory=list)
    clock: str = "wall"  # samples_s's clock: "wall", or "cpu" (process CPU time, porter.runtime.policy)
    other_s: list[float] = field(default_factory=list)  # the same calls on the other clock

    @property
    def stats(self) -> Samples:
        return Samples.of(self.samples_s)

    @property
    def median_s(self) -> float:
        return self.stats.median

    @property
    def iqr_s(self) -> float:
        return self.stats.iqr

    @property
    def spread(self) -> float:
        """IQR relative to the median."""
        return self.stats.rel_spread

    @property
    def noisy(self) -> bool:
        return self.stats.noisy

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


def time_steps(step: Callable[[], Any], warmup: int, repeats: int, clock: str = "wall") -> Timing:
    """Run step warmup times untimed, then time repeats calls (step must synchronise) on both
    clocks; samples_s on `clock` (the measurement policy's), other_s on the other."""
    for _ in range(warmup):
        step()
    pick = 1 if clock == "cpu" else 0
    both = [timed_call(step) for _ in range(repeats)]
    return Timing([b[pick] for b in both], clock, [b[1 - pick] for b in both])
