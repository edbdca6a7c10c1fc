"""Is a module's (or a group's) time gap more than the steps' noise? An interval per gap.

A live pair's module and group times are profiler self times summed over a few profiled
steps; on a shared machine the same GEMM read 2.9x in one layer and 1.01x in the next, and
nothing said a gap was noise. Each profiled step of one side is paired with the step of the
same rank on the other (step k with step k: the steps are repeats of one forward, so any
pairing is fair, and a paired difference carries both sides' noise); the gap per step is
target minus source, each side scaled as diagnosis.json's per-step times are
(porter.analysis.headline.step_scale), and the interval is widened by each side's scale
interval (step_scale_bounds): a scale is itself measured, and one profiling phase slowed by
another process moves every op of that side alike. The interval is the median's 95% order-statistic
interval of those per-step gaps (porter.core.samples.median_ci: under 6 steps, their range),
and a gap is ``significant`` when that interval excludes zero. With 3 steps that asks all
three to agree in sign, which noise alone does 1 time in 4; the CLI profiles
DEFAULT_PROFILED_STEPS steps, where a gap that is only noise is called significant about 1 time
in 50 (the interval of a median of 10 runs from the 2nd to the 9th value: 97.9%).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pandas as pd

from porter.analysis.optime import op_times
from porter.core.samples import median_ci

DEFAULT_PROFILED_STEPS = 10  # the order-statistic interval of a median of 10 is ranks 2..9 (97.9%)
GAP_COLUMNS = ("gap_low_us", "gap_high_us", "gap_steps", "significant")


def _per_step(ops: pd.DataFrame, keys: np.ndarray) -> pd.DataFrame:
    """key x step -> charged time (us) of the ops whose key is given (NaN keys left out), as
    each step measured it: the aligned times are each op call's median over the steps
    (porter.analysis.step_median), which leaves no step-to-step noise to measure."""
    t = op_times(ops).values.reindex(ops["op_id"].to_numpy()).fillna(0.0).to_numpy()
    f = pd.DataFrame({"key": keys, "step": ops["step"].to_numpy(), "t": t})
    f = f[(f["step"] >= 0) & f["key"].notna()]
    if f.empty:
        return pd.DataFrame()
    tab = f.groupby(["key", "step"])["t"].sum().unstack("step", fill_value=0.0)
    return tab.reindex(columns=sorted(tab.columns), fill_value=0.0)


Bounds = tuple[tuple[float, float], tuple[float, float]]


def _scales(headline: Mapping[str, Any] | None) -> tuple[tuple[float, float], Bounds]:
    """Each side's step_scale and its 95% interval (porter.analysis.headline.step_scale_bounds)."""
    sides = (headline or {}).get("sides") or {}
    points, bounds = [], []
    for role in ("source", "target"):
        side = sides.get(role) or {}
        point = float(side.get("step_scale") or 1.0)
        lo, hi = side.get("step_scale_ci95") or (point, point)
        points.append(point)
        bounds.append((float(lo), float(hi)))
    return (points[0], points[1]), (bounds[0], bounds[1])


def gap_intervals(source: pd.DataFrame, target: pd.DataFrame, scales: tuple[float, float],
                  bounds: Bounds | None = None) -> pd.DataFrame:
    """key -> gap_low_us, gap_high_us (the 95% interval of the per-step gap), gap_steps (the
    steps paired) and significant, from each side's key x step table (_per_step).

    bounds: each side's scale interval. The gap target * a - source * b rises with a and falls
    with b (times are never negative), so the low end is the steps' low end at (a_low, b_high)
    and the high end theirs at (a_high, b_low): a scale known to 8% moves a 125 us module's gap
    by 10 us, which its steps alone do not show."""
    if source.empty or target.empty:
        return pd.DataFrame(columns=list(GAP_COLUMNS))
    (s_lo, s_hi), (t_lo, t_hi) = bounds or ((scales[0], scales[0]), (scales[1], scales[1]))
    n = min(source.shape[1], target.shape[1])
    keys = source.index.union(target.index)
    s = source.reindex(keys, fill_value=0.0).to_numpy()[:, :n]
    t = target.reindex(keys, fill_value=0.0).to_numpy()[:, :n]
    if n >= 2:
        # median_ci's order-statistic ranks for n values, once for every row: its bounds over 0..n-1
        r_lo, r_hi = (int(r) for r in median_ci(np.arange(n)))
        lo = np.sort(t * min(t_lo, scales[1]) - s * max(s_hi, scales[0]), axis=1)[:, r_lo]
        hi = np.sort(t * max(t_hi, scales[1]) - s * min(s_lo, scales[0]), axis=1)[:, r_hi]
    else:
        lo = hi = np.full(len(keys), np.nan)
    return pd.DataFrame({"gap_low_us": lo, "gap_high_us": hi, "gap_steps": n,
                         "significant": (n >= 2) & ((lo > 0) | (hi < 0))}, index=keys)[list(GAP_COLUMNS)]


def with_key_gaps(table: pd.DataFrame, al: Any, headline: Mapping[str, Any] | None, column: str,
                  source_keys: np.ndarray | None = None, target_keys: np.ndarray | None = None) -> pd.DataFrame:
    """A roll-up keyed by one of the ops' columns (module, module_kind) with each key's gap
    interval per step; source_keys/target_keys: the key of each aligned op when the column is
    not on the ops themselves."""
    sk = source_keys if source_keys is not None else al.source_ops[column].to_numpy(dtype=object)
    tk = target_keys if target_keys is not None else al.target_ops[column].to_numpy(dtype=object)
    src = _per_step(al.source_ops, sk)
    tgt = _per_step(al.target_ops, tk)
    return _joined(table, "key", gap_intervals(src, tgt, *_scales(headline)))


def with_group_gaps(groups: pd.DataFrame, al: Any, headline: Mapping[str, Any] | None) -> pd.DataFrame:
    """groups with each group's gap interval per step, from the ops each side holds in it."""
    def keys(ops: pd.DataFrame, column: str) -> np.ndarray:
        of = {int(i): gid for gid, ids in zip(groups["group_id"], groups[column]) for i in ids}
        return np.array([of.get(int(i)) for i in ops["op_id"].to_numpy()], dtype=object)

    src = _per_step(al.source_ops, keys(al.source_ops, "source_op_ids"))
    tgt = _per_step(al.target_ops, keys(al.target_ops, "target_op_ids"))
    return _joined(groups, "group_id", gap_intervals(src, tgt, *_scales(headline)))


def _joined(table: pd.DataFrame, on: str, gaps: pd.DataFrame) -> pd.DataFrame:
    if gaps.empty or table.empty:
        return table
    g = gaps.reindex(table[on].to_numpy())
    out = table.copy()
    for c in GAP_COLUMNS:
        out[c] = g[c].to_numpy()
    out["significant"] = out["significant"].fillna(False).astype(bool)
    return out

