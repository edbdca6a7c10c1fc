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


def within_noise(row: Any) -> bool:
    """A diagnosis.json row (by_module, by_module_kind, groups) whose gap interval per profiled
    step was measured (two steps or more: porter.analysis.gap_noise) and holds zero; a row
    without one (a recorded pair) is not judged."""
    steps = row.get("gap_steps") if isinstance(row, dict) else None
    measured = isinstance(steps, (int, float)) and steps == steps and steps >= 2
    return bool(measured and not row.get("significant"))
