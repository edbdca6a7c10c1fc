"""Vectorised interval nesting against a brute-force definition of 'innermost open range'."""

from __future__ import annotations

import numpy as np
import pytest

from profilers.intervals import Nesting, Timeline


def brute_enclosing(starts, ends, t):
    open_ = [i for i in range(len(starts)) if starts[i] <= t < ends[i]]
    return max(open_, key=lambda i: (starts[i], -ends[i])) if open_ else -1


@pytest.mark.parametrize("seed", range(20))
def test_enclosing_and_parents_match_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 60))
    starts = rng.integers(0, 80, n).astype(float)
    ends = starts + rng.integers(0, 30, n)
    nest = Nesting(starts, ends)
    queries = rng.uniform(-5, 120, 50)
    for t, got in zip(queries, nest.enclosing(queries)):
        want = brute_enclosing(starts, ends, t)
        assert (want == -1 and got == -1) or (starts[got], ends[got]) == (starts[want], ends[want])
    parents = nest.parents()
    for pos, i in enumerate(nest.order):
        earlier = [j for j in nest.order[:pos] if ends[j] > starts[i]]
        assert parents[i] == (earlier[-1] if earlier else -1)


def test_threads_on_one_timeline_do_not_see_each_other():
    starts = np.array([0.0, 0.0]); ends = np.array([10.0, 10.0]); thread = np.array([0, 1])
    tl = Timeline.covering(ends)
    nest = Nesting(tl.key(starts, thread), tl.key(ends, thread))
    got = nest.enclosing(tl.key(np.array([5.0, 5.0, 11.0]), np.array([0, 1, 0])))
    assert got.tolist() == [0, 1, -1]
