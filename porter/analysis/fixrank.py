"""Ranking the fixes that matched (porter.analysis.fixes): what each recovers, how sure it is,
and the one order of the plan.

A group's recoverable time counts for every fix that applies to it: fixes are
alternative ways to recover the same time, so priorities do not add up across fixes
(porter.analysis.plan picks the fixes that do add up).

What a fix recovers is split in two a reviewer can check against the groups: what it
*closes* of its groups' measured gap to the source (each group's recoverable time, at most
its positive gap) and what lies *beyond parity* (the rest: headroom to the target's own
ceiling). Fixes rank by what they close per engineer-day: a port is judged against its
source first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from porter.analysis.fixes import Catalogue, FixEntry, applies_mask, column, load_catalogue, symptoms_table
from porter.analysis.perfmodel import Ceilings, expected_from_source_us, recoverable_us
from porter.core.stacks import first_step_for

# Conditions whose evidence is the other side's run of the same work (eager ops against a
# compiled region): where the cost is unknown, the time that run shows reachable
# (demonstrated_us) is what the fix can recover, rather than nothing.
_DEMONSTRATED = {"source_compiled", "target_compiled", "outside", "source_stack"}
# Conditions that name a specific symptom (count as evidence for confidence).
_SPECIFIC = {"min_kernel_ratio", "max_roofline_efficiency", "misaligned", "dtype_changed", "on_host", "became_sort",
             "source_compiled", "target_compiled", "outside", "source_stack",
             "min_host_fraction", "min_recompiles", "max_kernel_ratio", "rewrite_differs"}


@dataclass(frozen=True)
class RankedFix:
    rank: int  # 1-based within its kind
    kind: str  # "perf" or "accuracy"
    fix_id: str
    title: str
    tier: str
    days: tuple[float, float]
    modules: tuple[str, ...]
    op_classes: tuple[str, ...]
    ops: tuple[str, ...]
    group_ids: tuple[str, ...]
    why: str  # the fix's reason plus the symptoms seen
    first_step: str
    recoverable_us: float  # sum over its groups (perf model upper bound) = closes_gap_us + beyond_parity_us
    demonstrated_us: float  # the part the source's scaled time shows is reachable
    priority: float  # closes_gap_us per engineer-day (midpoint of days); NaN for accuracy
    severity: float  # max local_error / tolerance over its groups; NaN for perf
    confidence: str  # high / medium / low
    evidence: tuple[str, ...] = field(default=())
    # "regression": the target is slower than the source here; "headroom": the target is far
    # from its own roofline here, whatever the source does (see headroom_hits)
    opportunity: str = "regression"
    measured_gap_us: float = math.nan  # its groups' positive measured gap to the source, summed (gaps within noise 0)
    closes_gap_us: float = math.nan  # per group min(recoverable, positive gap), summed: <= measured_gap_us
    beyond_parity_us: float = math.nan  # recoverable_us - closes_gap_us: headroom past the source's time
    catalogue_title: str = ""  # the catalogue entry's own title (title names the op and module too)


def _gains(groups: pd.DataFrame, sym: pd.DataFrame, src_c: Ceilings | None, tgt_c: Ceilings | None) -> tuple[np.ndarray, np.ndarray]:
    if "recoverable_us" in groups.columns:
        rec = groups["recoverable_us"].to_numpy(np.float64)
        dem = column(groups, "demonstrated_us", np.nan).to_numpy(np.float64)
        return rec, np.where(np.isnan(dem), rec, dem)
    tgt = groups["target_us"].to_numpy(np.float64)
    dtype = sym["target_dtype"].to_numpy(object)
    rl = sym["roofline_efficiency"].to_numpy(np.float64) * tgt
    kw = dict(flops=groups["flops"].to_numpy(np.float64), bytes_=groups["bytes"].to_numpy(np.float64), dtype=dtype)
    rec = recoverable_us(tgt, groups["source_us"], rl, src_c, tgt_c, **kw)
    scaled, _ = expected_from_source_us(groups["source_us"], src_c, tgt_c, **kw)
    return rec, np.maximum(tgt - scaled, 0.0)


def _describe(cond: Mapping[str, Any], rows: pd.DataFrame) -> list[str]:
    seen = []
    if "min_ratio" in cond:
        seen.append(f"target/source time up to {rows['ratio'].max():.2f}x")
    if "min_kernel_ratio" in cond or "max_kernel_ratio" in cond:
        seen.append(f"target/source kernels up to {rows['kernel_ratio'].max():.2f}x")
    if "max_roofline_efficiency" in cond:
        seen.append(f"at {100 * rows['roofline_efficiency'].min():.0f}-{100 * rows['roofline_efficiency'].max():.0f}% of roofline")
    for flag, text in (("misaligned", "dims off the hardware tile"), ("dtype_changed", "dtype differs from source"),
                       ("became_sort", "the target runs a sort"),
                       ("source_compiled", "the source runs it as one torch.compile region, the target as eager ops"),
                       ("target_compiled", "the target already runs it as a torch.compile region, the source as eager ops"),
                       ("on_host", "ran on the host"), ("introduces_error", "local error jumps"),
                       ("rewrite_differs", "the rewrite computes a value the original does not")):
        if cond.get(flag) is True:
            seen.append(text)
    if "min_host_fraction" in cond:
        seen.append(f"host share up to {100 * rows['host_fraction'].max():.0f}%")
    if "min_recompiles" in cond:
        seen.append(f"{int(rows['recompiles'].max())} recompiles")
    if (rows["error_ratio"] > 0).any():
        seen.append(f"local error up to {rows['error_ratio'].max():.3g}x tolerance")
    return seen


def _confidence(entry: FixEntry, rows: pd.DataFrame, rec: np.ndarray, dem: np.ndarray) -> tuple[str, list[str]]:
    if entry.kind == "accuracy":
        worst = float(np.nanmax(rows["error_ratio"].to_numpy(np.float64))) if rows["error_ratio"].notna().any() else math.nan
        level = "high" if worst >= 10 else "medium" if worst >= 2 else "low"
        return level, [f"local error {worst:.3g}x tolerance" if not math.isnan(worst) else "no local error measured"]
    evidence = []
    known = np.isfinite(rows["roofline_efficiency"].to_numpy(np.float64))
    heavy = int(np.argmax(np.nan_to_num(rec, nan=-1.0))) if len(rec) else None
    if heavy is not None and known[heavy]:
        evidence.append("roofline known")
    if np.nansum(rec) > 0 and np.nansum(dem) >= 0.5 * np.nansum(rec):
        evidence.append("source shows the time is reachable")
    if _SPECIFIC & set(entry.applies_when):
        evidence.append("specific symptom matched")
    level = {3: "high", 2: "medium"}.get(len(evidence), "low")
    if not known.all():  # part of what the fix rests on has no cost model: one level less sure
        level = {"high": "medium", "medium": "low"}.get(level, "low")
        counted = ("the time the other side's run shows reachable counts instead" if _DEMONSTRATED & set(entry.applies_when)
                   else "not counted as recoverable")
        evidence.append(f"{int((~known).sum())} of {len(known)} groups have no cost model ({counted})")
    return level, evidence


REGRESSION, HEADROOM = "regression", "headroom"
HEADROOM_EFFICIENCY = 0.3  # at most this share of its own roofline: far from it, whatever the source does


def headroom_hits(entry: FixEntry, sym: pd.DataFrame, taken: set[int]) -> list[int]:
    """Groups where a perf fix that asks for a slowdown (min_ratio) would apply but the target
    is not slower: its other conditions hold and the target runs at <= HEADROOM_EFFICIENCY
    of its own roofline (cost known)."""
    cond = entry.applies_when
    if entry.kind != "perf" or "min_ratio" not in cond or entry.recovers == "source":  # the source's time is its reach
        return []
    rest = {k: v for k, v in cond.items() if k not in ("min_ratio", "max_roofline_efficiency")}
    far = (sym["roofline_efficiency"] <= HEADROOM_EFFICIENCY).to_numpy()  # NaN (unknown) compares False
    return [int(i) for i in np.flatnonzero(applies_mask(rest, sym) & far) if int(i) not in taken]


def fix_title(title: str, ops: Iterable[str], modules: Iterable[str]) -> str:
    """A catalogue title named for where it applies: its heaviest op and module, and how many
    more (two fixes of one catalogue entry never read alike)."""
    ops, modules = list(ops), list(modules)
    op = ops[0] if ops and ops[0] else "(op unknown)"
    module = modules[0] if modules and modules[0] else "(no module)"
    more = max(len(ops), len(modules)) - 1
    return f"{title}: {op} in {module}" + (f" (+{more} more)" if more > 0 else "")


def _ranked_fix(entry: FixEntry, opportunity: str, rows: pd.DataFrame, r: np.ndarray, d: np.ndarray,
                gap: np.ndarray) -> RankedFix | None:
    total = float(np.nansum(r))  # unknown-cost groups (NaN) claim nothing
    if entry.kind == "perf" and total <= 0:
        return None
    level, evidence = _confidence(entry, rows, r, d)
    if opportunity == HEADROOM:
        evidence = [f"headroom: target at {100 * rows['roofline_efficiency'].max():.0f}% or less of its own roofline "
                    f"(target/source time {rows['ratio'].min():.2f}-{rows['ratio'].max():.2f}x)", *evidence]
    closes = float(np.minimum(np.nan_to_num(r, nan=0.0), gap).sum())
    order = np.argsort(-np.nan_to_num(r, nan=-1.0), kind="stable")
    severity = float(np.nanmax(rows["error_ratio"])) if entry.kind == "accuracy" and rows["error_ratio"].notna().any() else math.nan
    uniq = lambda col: tuple(dict.fromkeys(rows[col].iloc[order].tolist()))  # noqa: E731 - keeps heaviest first
    cond = entry.applies_when if opportunity == REGRESSION else {"max_roofline_efficiency": HEADROOM_EFFICIENCY}
    modules, ops = uniq("module"), uniq("framework_op")
    return RankedFix(
        rank=0, kind=entry.kind, fix_id=entry.id, title=fix_title(entry.title, ops, modules), tier=entry.tier,
        days=entry.days, modules=modules, op_classes=uniq("op_class"), ops=ops, group_ids=uniq("group_id"),
        why=entry.why + ("; seen: " + ", ".join(_describe(cond, rows)) if len(rows) else ""),
        first_step=first_step_for(str(rows["stack"].iloc[0]), entry.first_step, entry.first_steps), recoverable_us=total, demonstrated_us=float(np.nansum(d)),
        priority=closes / entry.mid_days if entry.kind == "perf" else math.nan,
        severity=severity, confidence=level, evidence=tuple(evidence), opportunity=opportunity,
        measured_gap_us=float(gap.sum()), closes_gap_us=closes if entry.kind == "perf" else math.nan,
        beyond_parity_us=total - closes if entry.kind == "perf" else math.nan, catalogue_title=entry.title,
    )


def measured_gaps(groups: pd.DataFrame) -> np.ndarray:
    """Each group's measured gap to the source where the target is slower, else 0: what a fix
    can close. A live pair's gap within its profiled steps' noise is no measured gap (0)."""
    gap = np.maximum(groups["target_us"].to_numpy(np.float64) - groups["source_us"].to_numpy(np.float64), 0.0)
    if "within_noise" in groups.columns:
        gap = np.where(groups["within_noise"].fillna(False).to_numpy(bool), 0.0, gap)
    return np.nan_to_num(gap, nan=0.0)


def matched_fixes(groups: pd.DataFrame, catalogue: Catalogue | None, source_ceilings: Ceilings | None,
                  target_ceilings: Ceilings | None) -> list[RankedFix]:
    """Every catalogue fix that applies to the groups, unranked (rank 0), in catalogue order:
    ranked() orders them, together with fixes found elsewhere (porter ops' flagged ops).

    Perf fixes with nothing to recover are dropped. Ceilings feed the perf model when groups
    lack roofline_us / recoverable_us; None falls back to the unscaled source time (see
    docs/perfmodel.md).
    """
    catalogue = catalogue or load_catalogue()
    if groups.empty:
        return []
    groups = groups.reset_index(drop=True)
    sym = symptoms_table(groups, target_ceilings)
    rec, dem = _gains(groups, sym, source_ceilings, target_ceilings)
    # a gap within the profiled steps' noise is no regression to fix (its headroom still counts)
    noise = (groups["within_noise"].fillna(False).to_numpy(bool) if "within_noise" in groups.columns
             else np.zeros(len(groups), bool))
    gap = measured_gaps(groups)
    out: list[RankedFix] = []
    for entry in catalogue.fixes:
        hit = [i for i in np.flatnonzero(applies_mask(entry.applies_when, sym)).tolist()
               if entry.kind != "perf" or not noise[i]]
        for opportunity, rows_at in ((REGRESSION, hit), (HEADROOM, headroom_hits(entry, sym, set(hit)))):
            r = rec[rows_at]
            if entry.recovers == "source":  # runs the part as the source does: the source's time, no further
                r = np.minimum(np.nan_to_num(dem[rows_at], nan=np.inf), gap[rows_at])
            elif _DEMONSTRATED & set(entry.applies_when):  # the other side's run is the evidence: its time counts
                r = np.where(np.isnan(r), dem[rows_at], r)
            fix = _ranked_fix(entry, opportunity, sym.iloc[rows_at], r, dem[rows_at], gap[rows_at]) if rows_at else None
            if fix is not None:
                out.append(fix)
    return out


def ranked(fixes: Iterable[RankedFix]) -> list[RankedFix]:
    """The one order of a fix plan, whatever found the fixes: perf fixes by priority (what they
    close per engineer-day; unknown priority, e.g. a porter ops gap with no time attached, after
    every known one), ties by what lies beyond parity per engineer-day, then accuracy fixes by
    severity (unknown last); rank is 1-based within each kind."""
    fixes = list(fixes)

    def beyond(f: RankedFix) -> float:
        mid = (f.days[0] + f.days[1]) / 2
        return 0.0 if math.isnan(f.beyond_parity_us) or mid <= 0 else f.beyond_parity_us / mid

    perf = sorted((f for f in fixes if f.kind != "accuracy"),
                  key=lambda f: (math.isnan(f.priority), 0.0 if math.isnan(f.priority) else -f.priority,
                                 -beyond(f), f.fix_id, f.opportunity))
    acc = sorted((f for f in fixes if f.kind == "accuracy"),
                 key=lambda f: (-(f.severity if not math.isnan(f.severity) else -1), f.fix_id))
    return [replace(f, rank=i + 1) for i, f in enumerate(perf)] + [replace(f, rank=i + 1) for i, f in enumerate(acc)]


def rank_fixes(
    groups: pd.DataFrame,
    catalogue: Catalogue | None = None,
    *,
    source_ceilings: Ceilings | None = None,
    target_ceilings: Ceilings | None = None,
) -> list[RankedFix]:
    """Fixes that apply to the groups: perf fixes by priority, then accuracy fixes by severity.

    priority = what the fix closes of its groups' measured gap / midpoint engineer days
    (matched_fixes, ranked).
    """
    return ranked(matched_fixes(groups, catalogue, source_ceilings, target_ceilings))


def fix_of_record(record: Mapping[str, Any]) -> RankedFix:
    """A fix already in the `fixes` records format (porter.ops.in_diagnosis.fix_records), to be
    ranked with the rest; its rank is replaced by ranked()."""
    lists = ("days", "modules", "op_classes", "ops", "group_ids", "evidence")
    known = {f.name for f in fields(RankedFix)}
    return RankedFix(**{k: tuple(v) if k in lists else v for k, v in record.items() if k in known})


def fixes_frame(ranked: list[RankedFix]) -> pd.DataFrame:
    """Ranked fixes as a table (for reports and JSON output)."""
    return pd.DataFrame([{**f.__dict__, "days": list(f.days), "modules": list(f.modules), "op_classes": list(f.op_classes),
                          "ops": list(f.ops), "group_ids": list(f.group_ids), "evidence": list(f.evidence)} for f in ranked])
