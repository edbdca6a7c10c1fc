"""Reading diagnosis.json's fields forgivingly: the adapters' two helpers (reports.build,
reports.findings), so that a missing or non-finite field reads as absent alike everywhere."""

from __future__ import annotations

import math
from typing import Any


def _get(d: Any, *paths: str, default: Any = None) -> Any:
    """First present, non-null value among dotted paths ("end_to_end.ratio"); default when none is."""
    for path in paths:
        cur = d
        for part in path.split("."):
            cur = cur.get(part) if isinstance(cur, dict) else None
        if cur is not None:
            return cur
    return default


def _f(v: Any) -> float | None:
    try:
        out = float(v)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None
