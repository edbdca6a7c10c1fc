"""porter.analysis.modulemap: modules paired by their own parameters' signatures."""

from __future__ import annotations

import numpy as np

from porter.analysis.modulemap import build_map, renamed_members


def sig(*arrays):
    return [[list(a.shape), float(a.astype(np.float64).sum()), float((a.astype(np.float64) ** 2).sum())] for a in arrays]


def test_a_transposed_weight_pairs_and_look_alike_modules_pair_in_order():
    rng = np.random.default_rng(0)
    w1, w2 = rng.standard_normal((8, 4)), rng.standard_normal((8, 4))
    ones, zeros = np.ones(4), np.zeros(4)
    source = [("", []), ("enc/0/lin", sig(w1)), ("enc/0/norm", sig(ones, zeros)), ("enc/1/lin", sig(w2)),
              ("enc/1/norm", sig(ones, zeros)), ("enc/0", []), ("enc/1", [])]
    target = [("", []), ("blocks/0/dense", sig(w1.T)), ("blocks/0/ln", sig(zeros, ones)), ("blocks/1/dense", sig(w2.T)),
              ("blocks/1/ln", sig(zeros, ones)), ("blocks/0", []), ("blocks/1", [])]
    m = build_map(source, target)
    assert m.mapping == {"blocks/0/dense": "enc/0/lin", "blocks/1/dense": "enc/1/lin", "blocks/0/ln": "enc/0/norm",
                         "blocks/1/ln": "enc/1/norm", "blocks/0": "enc/0", "blocks/1": "enc/1"}
    assert (m.by_parameters, m.by_containment, m.share) == (4, 2, 1.0)


def test_unrelated_weights_do_not_pair():
    rng = np.random.default_rng(1)
    m = build_map([("a", sig(rng.standard_normal((8, 4))))], [("b", sig(rng.standard_normal((8, 4))))])
    assert m.mapping == {} and m.share == 0.0 and m.unmatched_target == ("b",)


def test_fused_members_are_renamed():
    assert renamed_members('[["blocks/0/ln", "mean", 0.5]]', {"blocks/0/ln": "enc/0/norm"}) == '[["enc/0/norm", "mean", 0.5]]'
