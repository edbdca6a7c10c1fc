"""applies_mask (the ranking's whole-table rule) must say exactly what applies() says row by
row, including NaN in float and object columns and integer columns, for every threshold key."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from porter.analysis.fixes import THRESHOLDS, applies, applies_mask


def _symptoms(n: int = 400) -> pd.DataFrame:
    rng = np.random.default_rng(7)
    ratio = rng.lognormal(0.0, 1.0, n)
    ratio[::17] = np.nan
    eff = rng.uniform(0.0, 2.5, n).astype(object)
    eff[::13] = np.nan  # unknown roofline, in an object column
    return pd.DataFrame({
        "ratio": ratio, "kernel_ratio": np.round(rng.uniform(0.0, 3.0, n), 1),
        "roofline_efficiency": eff, "host_fraction": rng.uniform(0.0, 2.5, n),
        "recompiles": rng.integers(0, 4, n), "error_ratio": rng.lognormal(0.0, 2.0, n),
        "op_class": rng.choice(["gemm", "attention", "elementwise"], n),
    })


@pytest.mark.parametrize("key", sorted(THRESHOLDS))
@pytest.mark.parametrize("want", [0.0, 0.5, 1.0, 2.0])
def test_threshold_mask_equals_per_row_rule(key: str, want: float) -> None:
    sym = _symptoms()
    cond = {key: want, "op_class": ["gemm", "attention"]}
    rows = sym.to_dict(orient="records")
    expected = np.array([applies(cond, r) for r in rows])
    got = applies_mask(cond, sym)
    assert 0 < expected.sum() < len(rows) or want == 0.0  # the case splits the rows (or all pass a zero floor)
    np.testing.assert_array_equal(got, expected)
