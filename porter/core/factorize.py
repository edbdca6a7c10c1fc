"""Dense codes for a column's values, as `pandas.factorize` gives them, without importing
pandas for a small trace.

The readers code names, categories and thread ids this way. Importing pandas costs ~0.45 s
of CPU, more than `porter ingest` of a 20k-event trace spends on everything else; a dict
codes ~10M values in that time. So object columns are coded by a dict while they are short
and pandas is not loaded, and by pandas' C hash table otherwise; numbers by numpy. All three
give the same answer: codes from 0 in order of first appearance, None and NaN coded -1.
"""

from __future__ import annotations

import sys

import numpy as np

# Object columns longer than this use pandas' hash table (importing pandas if need be): a dict
# spends ~0.1 us a value, so past ~1M values the import is the cheaper half.
PANDAS_FROM = 500_000


def factorize(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(codes, uniques) of a 1-D array: uniques in order of first appearance, codes int64
    indexing them, -1 for None and NaN (which are left out of uniques)."""
    arr = np.asarray(values)
    if arr.dtype.kind in "biuf":
        return _numbers(arr)
    if arr.dtype != object:
        arr = arr.astype(object)
    if len(arr) >= PANDAS_FROM or "pandas" in sys.modules:
        import pandas as pd

        codes, uniques = pd.factorize(arr)
        return codes.astype(np.int64, copy=False), np.asarray(uniques, dtype=object)
    return _objects(arr)


def _objects(arr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Three passes in C over the rows (dict.fromkeys keeps first appearance), one in
    Python over the distinct values."""
    values = arr.tolist()
    code = dict.fromkeys(values)
    kept = [v for v in code if not (v is None or (isinstance(v, float) and v != v))]
    for v in code:
        code[v] = -1
    for i, v in enumerate(kept):
        code[v] = i
    codes = np.fromiter(map(code.__getitem__, values), dtype=np.int64, count=len(values))
    uniques = np.empty(len(kept), dtype=object)
    uniques[:] = kept
    return codes, uniques


def _numbers(arr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    codes = np.full(len(arr), -1, dtype=np.int64)
    ok = np.flatnonzero(~np.isnan(arr)) if arr.dtype.kind == "f" else np.arange(len(arr))
    if len(ok) == 0:
        return codes, arr[:0]
    uniq, first, inverse = np.unique(arr[ok], return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # sorted uniques -> order of first appearance
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    codes[ok] = rank[inverse.reshape(-1)]
    return codes, uniq[order]
