"""Trace values converted to the schema's int64 and float64 columns, checked.

A trace's numbers come from anywhere: an XSpace uint64 stat of 2**64 - 1, a timestamp of
-2**63 that an offset pushes past int64, a JSON integer of 10**30. numpy's astype raises
OverflowError ("Python int too large to convert to C long") on those, or silently wraps an
out-of-range float. Every conversion of trace data to int64 goes through here instead, and a
value that does not fit is an input error naming the column (the reader adds the file).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from porter.core.errors import TraceFormatError

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# The longest text a trace field may hold. The corpus's longest is 5,649 characters (a
# kernel list on an op) and 5,123 (a demangled kernel name); 4 Mi is ~700x that, so a
# megabyte of Input Dims (porter keeps and hashes it) passes and a 200 MB kernel name, whose
# tables and views would cost gigabytes, is refused by name.
MAX_FIELD_CHARS = 4 << 20
FIELD_CHARS_ENV = "PORTER_MAX_FIELD_CHARS"
_FLOAT_EDGE = 2.0**63  # the first float past INT64_MAX (INT64_MAX itself rounds up to it)


class FieldOutOfRange(TraceFormatError):
    """A trace value that its schema column cannot hold (raised without the path; the reader's
    caller, profilers.detect.read_trace, names the file)."""


def _first(values: np.ndarray, bad: np.ndarray) -> Any:
    return values[int(np.flatnonzero(bad)[0])]


def _refuse(field: str, value: Any, what: str) -> FieldOutOfRange:
    text = repr(value)
    text = text if len(text) <= 40 else text[:37] + "..."
    return FieldOutOfRange(f"{field}: value {text} {what}", hint="damaged trace, or a value porter cannot store")


def as_int64(values: Any, field: str) -> np.ndarray:
    """values as an int64 array; FieldOutOfRange (naming `field`) for a value outside int64,
    a non-finite or fractional float, or anything that is not a number."""
    arr = np.asarray(values)
    if arr.dtype == np.int64:
        return arr
    kind = arr.dtype.kind
    if kind in "ib":
        return arr.astype(np.int64)
    if kind == "u":
        bad = arr > INT64_MAX
        if bad.any():
            raise _refuse(field, int(_first(arr, bad)), "is past int64")
        return arr.astype(np.int64)
    if kind == "f":
        with np.errstate(invalid="ignore"):
            bad = ~np.isfinite(arr) | (arr < -_FLOAT_EDGE) | (arr >= _FLOAT_EDGE) | (arr != np.trunc(arr))
        if bad.any():
            raise _refuse(field, float(_first(arr, bad)), "is not a whole number within int64")
        return arr.astype(np.int64)
    values = arr.ravel().tolist()  # objects (Python ints of any size), or text
    try:
        return np.fromiter(values, dtype=np.int64, count=len(values)).reshape(arr.shape)
    except (OverflowError, TypeError, ValueError):
        pass
    for v in values:  # the slow path only finds the value to name
        if isinstance(v, (int, np.integer)) and INT64_MIN <= int(v) <= INT64_MAX:
            continue
        raise _refuse(field, v, "is not an integer within int64")
    return np.array([int(v) for v in values], dtype=np.int64).reshape(arr.shape)


def as_float64(values: Any, field: str) -> np.ndarray:
    """values as a float64 array; FieldOutOfRange (naming `field`) for an integer past float64's
    range or a value that is not a number (NaN and infinities stay: the schema checks them)."""
    arr = np.asarray(values)
    if arr.dtype == np.float64:
        return arr
    try:
        return arr.astype(np.float64)
    except (OverflowError, TypeError, ValueError):
        pass
    for v in arr.tolist():
        try:
            float(v)
        except (OverflowError, TypeError, ValueError):
            raise _refuse(field, v, "is not a number within float64") from None
    return arr.astype(np.float64)


def max_field_chars() -> int:
    """The limit in force: PORTER_MAX_FIELD_CHARS when set (0: none), else MAX_FIELD_CHARS."""
    try:
        return int(os.environ.get(FIELD_CHARS_ENV, MAX_FIELD_CHARS))
    except ValueError:
        return MAX_FIELD_CHARS


def check_text_length(values: np.ndarray, field: str) -> None:
    """FieldOutOfRange naming `field` when one of its texts is past max_field_chars() (~25 ms
    per million rows: one C-level pass of len)."""
    limit = max_field_chars()
    if limit <= 0 or not len(values):
        return
    longest = max(map(len, values))
    if longest > limit:
        raise FieldOutOfRange(f"{field}: one value is {longest:,} characters long, past porter's limit of "
                              f"{limit:,} per field", hint=f"damaged trace? {FIELD_CHARS_ENV}=0 reads it anyway")
