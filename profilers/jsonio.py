"""JSON loading and field checks shared by the JSON-based readers.

Damaged or odd input must end as a TraceFormatError with a one-line reason, never as a
KeyError or TypeError deep inside a reader; these helpers are where that happens.
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import orjson

from porter.core.errors import TraceFormatError
from profilers.base import read_bytes


def load_json(path: Path, what: str) -> Any:
    """The parsed document (gunzipped when needed); `what` names the format in errors."""
    data = read_bytes(path)
    # The parser makes no reference cycles, yet its ~10 containers per record trigger
    # repeated full garbage collections that scan all of them: half the parse time.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise TraceFormatError(f"not valid JSON for a {what} ({exc})", path=path,
                               hint="the file may be truncated") from None
    finally:
        if enabled:
            gc.enable()


def number(value: Any, field: str, path: Path) -> float:
    """A JSON number (not a bool) within +-1e300 (so sums and differences of it stay
    finite; NaN and Inf fail too), or TraceFormatError naming the field."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        shown = f" {value[:40]!r}" if isinstance(value, str) else ""  # never a container's repr: it recurses
        raise TraceFormatError(f"field {field!r} is {type(value).__name__}{shown}, not a number", path=path)
    if not -1e300 < value < 1e300:  # exact for ints of any size, false for NaN
        raise TraceFormatError(f"field {field!r} is {str(value)[:24]}, out of range", path=path)
    return value


def mapping(value: Any, field: str, path: Path) -> dict:
    if not isinstance(value, dict):
        raise TraceFormatError(f"{field!r} is {type(value).__name__}, not an object", path=path)
    return value


def sequence(value: Any, field: str, path: Path) -> list:
    if not isinstance(value, list):
        raise TraceFormatError(f"{field!r} is {type(value).__name__}, not a list", path=path)
    return value
