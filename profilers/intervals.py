"""Vectorised interval nesting: which interval encloses a point, for tens of thousands at once.

Profilers write flat lists of [start, end) ranges per thread (ops, module scopes, runtime
calls). Readers need the *innermost* range around a point: the op that issued a launch,
the module around an op, an op's parent. A Python stack walk costs a few microseconds per
event; here every query is answered together with numpy in O(n log n).

"Innermost" is defined without assuming perfect nesting (profiler clocks round, so child
ranges sometimes poke out of their parents by a nanosecond): among the ranges open at the
query time (start <= t < end), the one that started last (ties: the shorter one, which
sorts after the longer).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NONE = -1


@dataclass(frozen=True)
class Timeline:
    """Ranges of several threads laid end to end on one axis so one search covers them all.

    Thread k's times are shifted by k * span, where span exceeds every time and duration,
    so a range never reaches into the next thread's stretch and searches stay per thread.
    """

    span: float

    @staticmethod
    def covering(*arrays: np.ndarray) -> "Timeline":
        hi = max((float(np.max(a)) for a in arrays if len(a)), default=0.0)
        return Timeline(span=2.0 * max(hi, 0.0) + 1.0)

    def key(self, t: np.ndarray, thread: np.ndarray) -> np.ndarray:
        return np.asarray(t, dtype=np.float64) + np.asarray(thread, dtype=np.float64) * self.span


class Nesting:
    """Sorted ranges plus a sparse table of running end maxima for 'last open range' queries."""

    def __init__(self, starts: np.ndarray, ends: np.ndarray):
        starts = np.asarray(starts, dtype=np.float64)
        ends = np.maximum(np.asarray(ends, dtype=np.float64), starts)
        # Sort by start; on equal starts the longer range first, so it is the outer one.
        self.order = np.lexsort((-ends, starts))
        self.starts = starts[self.order]
        self.ends = ends[self.order]
        self.rank = np.empty(len(starts), dtype=np.int64)
        self.rank[self.order] = np.arange(len(starts))
        levels = [self.ends]
        width = 1
        while 2 * width <= len(self.ends):
            prev = levels[-1]
            levels.append(np.maximum(prev[:-width], prev[width:]))
            width *= 2
        self._levels = levels

    def __len__(self) -> int:
        return len(self.starts)

    def _last_open_before(self, bound: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Per query, the largest sorted index j < bound with ends[j] > t, else NONE."""
        cur = np.asarray(bound, dtype=np.int64).copy()
        t = np.asarray(t, dtype=np.float64)
        if len(self) == 0:
            return np.full(len(cur), NONE, dtype=np.int64)
        for k in range(len(self._levels) - 1, -1, -1):
            width = 1 << k
            cand = cur - width
            ok = cand >= 0
            block_max = self._levels[k][np.clip(cand, 0, len(self._levels[k]) - 1)]
            skip = ok & (block_max <= t)
            cur = np.where(skip, cand, cur)
        j = cur - 1
        found = (j >= 0) & (self.ends[np.clip(j, 0, None)] > t)
        return np.where(found, j, NONE)

    def _original(self, j: np.ndarray) -> np.ndarray:
        if len(self) == 0:
            return j
        return np.where(j >= 0, self.order[np.clip(j, 0, None)], NONE)

    def enclosing(self, t: np.ndarray) -> np.ndarray:
        """Index (into the constructor's arrays) of the innermost range open at each time t."""
        t = np.asarray(t, dtype=np.float64)
        bound = np.searchsorted(self.starts, t, side="right")
        return self._original(self._last_open_before(bound, t))

    def parents(self) -> np.ndarray:
        """Index of the innermost other range open at each range's start, NONE at top level."""
        return self._original(self._last_open_before(np.arange(len(self)), self.starts))[self.rank]
