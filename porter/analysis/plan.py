"""The fix plan a review can redo: which ranked time fixes add up, what they close together,
what lies beyond parity, and the engineer-days, as diagnosis.json's `plan` block that every
view quotes rather than summing fixes of its own.

Fixes for the same groups are alternatives (porter.analysis.fixrank): in rank order, a fix
joins the plan when it closes some measured gap and shares no group with a fix already in
it; any other fix is marked with the plan fixes it is an alternative to. The plan's totals
are sums over its fixes and nothing else: total_us of their closes_gap_us, beyond_parity_us
of their beyond_parity_us, days of their day ranges.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

BASIS = ("sum of closes_gap_us over plan.fixes (each fix's recoverable time per group, at most that group's "
         "measured gap to the source); fixes that share a group with a better-ranked plan fix are alternatives, "
         "not summed; beyond_parity_us and days are sums over the same fixes")


@dataclass(frozen=True)
class Plan:
    fixes: tuple[int, ...]  # perf ranks summed, in rank order
    total_us: float  # what they close of the measured gap, summed
    beyond_parity_us: float  # headroom past the source's time they also claim, summed
    days: tuple[float, float]  # engineer-days, low and high, summed
    provisional: str | None  # why not to plan on it yet (the headline's advice), None when it can be

    def to_dict(self) -> dict[str, Any]:
        return {"fixes": list(self.fixes), "total_us": self.total_us, "beyond_parity_us": self.beyond_parity_us,
                "days": list(self.days), "provisional": self.provisional, "basis": BASIS}


def _num(v: Any) -> float:
    try:
        out = float(v)
    except (TypeError, ValueError):
        return 0.0
    return out if math.isfinite(out) else 0.0


def plan_fixes(fixes: Iterable[Mapping[str, Any]], advice: str | None = None) -> tuple[list[dict[str, Any]], Plan]:
    """The ranked fix records with in_plan and alternative_to (the plan ranks sharing one of
    its groups) set on each time fix, and the plan they make. advice: the headline's (its
    interval too wide to plan on), carried as the plan's `provisional`."""
    out = [dict(f) for f in fixes]
    owner: dict[str, int] = {}  # group id -> the plan fix that claims it
    chosen: list[dict[str, Any]] = []
    for f in sorted((f for f in out if f.get("kind") != "accuracy"), key=lambda f: int(f.get("rank") or 0)):
        groups = [str(g) for g in f.get("group_ids") or ()]
        f["alternative_to"] = sorted({owner[g] for g in groups if g in owner})
        f["in_plan"] = not f["alternative_to"] and _num(f.get("closes_gap_us")) > 0
        if f["in_plan"]:
            chosen.append(f)
            owner.update({g: int(f["rank"]) for g in groups})
    plan = Plan(
        fixes=tuple(int(f["rank"]) for f in chosen),
        total_us=sum(_num(f.get("closes_gap_us")) for f in chosen),
        beyond_parity_us=sum(_num(f.get("beyond_parity_us")) for f in chosen),
        days=(sum(float(f["days"][0]) for f in chosen), sum(float(f["days"][1]) for f in chosen)),
        provisional=advice or None,
    )
    return out, plan
