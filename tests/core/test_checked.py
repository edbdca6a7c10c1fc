"""Trace values into int64/float64 columns (porter/core/checked.py): the edges of int64 kept,
one past them refused naming the column, never numpy's OverflowError or a silent wrap."""

from __future__ import annotations

import numpy as np
import pytest

from porter.core.checked import FieldOutOfRange, as_float64, as_int64


def test_the_edges_of_int64_are_kept_from_every_source_dtype():
    edges = [-(2**63), -1, 0, 2**63 - 1]
    assert as_int64(np.array(edges, dtype=object), "ops.step").tolist() == edges
    assert as_int64(np.array([0, 2**63 - 1], dtype=np.uint64), "ops.step").tolist() == [0, 2**63 - 1]
    assert as_int64(np.array([-(2.0**63), 2.0**62]), "ops.step").tolist() == [-(2**63), 2**62]
    assert as_int64(np.array([True, False]), "ops.step").tolist() == [1, 0]


@pytest.mark.parametrize("values", [
    np.array([-1, 2**63], dtype=object),  # was: OverflowError
    np.array([-(2**63) - 1], dtype=object),
    np.array([2**64 - 1], dtype=np.uint64),  # was: wrapped to -1
    np.array([2.0**63]),  # was: wrapped to -2**63
    np.array([float("nan")]),
    np.array([1.5]),
    np.array(["x"], dtype=object),
])
def test_a_value_past_int64_or_not_an_integer_is_refused_naming_the_column(values):
    with pytest.raises(FieldOutOfRange, match=r"^kernels\.correlation: value "):
        as_int64(values, "kernels.correlation")


def test_an_integer_past_float64_is_refused_naming_the_column():
    assert as_float64(np.array([10**30, -1], dtype=object), "ops.flops").tolist() == [1e30, -1.0]
    with pytest.raises(FieldOutOfRange, match=r"^ops\.flops: value 1000"):
        as_float64(np.array([10**400], dtype=object), "ops.flops")  # was: OverflowError
