"""Reading diagnosis.json's fields forgivingly: the adapters' helpers (reports.build,
reports.findings, reports.terminal), so that a missing or non-finite field reads as absent, and
a row is named, alike everywhere."""

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


NO_MODULE = "(no module)"


def outside_kinds(stats: dict) -> str:
    """The runtime's kinds outside every module, largest first over both sides ('graph wrapper and
    runtime dispatch, guard checks'), so that the root's row says what a reader could fix there."""
    us: dict[str, float] = {}
    for side in ("source", "target"):
        for kind, v in (stats.get(f"{side}_outside_modules_by_kind_us") or {}).items():
            us[kind] = us.get(kind, 0.0) + (_f(v) or 0.0)
    return ", ".join(k for k, v in sorted(us.items(), key=lambda kv: -kv[1]) if v > 0)


def root_name(d: dict) -> str:
    """The name of a by_module (kind) row with a blank key (the root: ops outside every module),
    naming the runtime's kinds in it where the diagnosis counted them."""
    kinds = outside_kinds(_get(d, "alignment.stats", default=None) or {})
    return f"{NO_MODULE[:-1]}: {kinds})" if kinds else NO_MODULE
