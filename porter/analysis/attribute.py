"""Where the time goes between two runs: per matched group, per module, op class and op.

Times are totals over the profiled steps of each trace (what the alignment matched);
``per_step`` divides by a side's step count. The gap of a row is target minus source; its
share is that gap over the end-to-end gap (signed: a row that got faster has a negative
share when the whole got slower). Rows sort by gap, largest slowdown first. Roll-ups per module, class and framework op sum each
side's own ops (matched or not), so their totals equal the bundle totals.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Mapping

import numpy as np
import pandas as pd

from porter.analysis.align import UNMATCHED, Alignment
from porter.analysis.optime import op_times
from porter.core.samples import Samples


def step_totals(ops: pd.DataFrame, times: pd.Series) -> tuple[Samples, float]:
    """Charged time per profiled step, and the time outside any step.

    A trace without step markers counts as one step holding everything.
    """
    t = times.reindex(ops["op_id"].to_numpy()).fillna(0.0).to_numpy()
    steps = ops["step"].to_numpy()
    inside = steps >= 0
    if not inside.any():
        return Samples((float(t.sum()),)), 0.0
    per = pd.Series(t[inside]).groupby(steps[inside]).sum()
    return Samples(tuple(float(v) for v in per.to_numpy())), float(t[~inside].sum())


def _ratio(a: float, b: float) -> float:
    return b / a if a > 0 else float("inf") if b > 0 else float("nan")


def _finish(df: pd.DataFrame, total_gap: float) -> pd.DataFrame:
    df["delta_us"] = df["target_us"] - df["source_us"]
    df["ratio"] = [_ratio(a, b) for a, b in zip(df["source_us"], df["target_us"])]
    df["gap_share"] = df["delta_us"] / total_gap if total_gap else 0.0
    return df.sort_values("delta_us", ascending=False, kind="stable").reset_index(drop=True)


def group_table(al: Alignment) -> pd.DataFrame:
    """One row per matched group with both sides' time and the gap."""
    s = al.source_times.values.groupby(al.source_group).sum()
    t = al.target_times.values.groupby(al.target_group).sum()
    g = al.groups.drop(columns=["source_ids", "target_ids"]).copy()
    g["n_source"] = al.groups["source_ids"].map(len)
    g["n_target"] = al.groups["target_ids"].map(len)
    g["source_us"] = s.reindex(g["group_id"]).fillna(0.0).to_numpy()
    g["target_us"] = t.reindex(g["group_id"]).fillna(0.0).to_numpy()
    return _finish(g, al.target_times.total - al.source_times.total)


def rollup(al: Alignment, source_ops: pd.DataFrame, target_ops: pd.DataFrame, key: str) -> pd.DataFrame:
    """Both sides' time summed by one of the ops' own columns (module, module_kind, op_class, framework_op).

    Each side keeps its own value of the key, so a vendor-specific op (cudnn vs miopen
    convolution) shows as two rows; matched-group rows show them side by side.
    """
    def side(ops: pd.DataFrame, times: pd.Series, member: pd.Series) -> pd.DataFrame:
        vals = ops[key].to_numpy(dtype=object)
        if key == "framework_op":
            vals = np.where(vals == "", ops["name"].to_numpy(dtype=object), vals)
        ids = ops["op_id"].to_numpy()
        t = times.reindex(ids).fillna(0.0).to_numpy()
        m = member.reindex(ids).fillna(UNMATCHED).to_numpy()
        f = pd.DataFrame({"key": vals, "t": t, "u": np.where(m == UNMATCHED, t, 0.0)})
        by = f.groupby("key")  # plain reductions: named .agg() costs ~30 ms of pandas set-up per call
        return pd.DataFrame({"us": by["t"].sum(), "unmatched_us": by["u"].sum(), "count": by["t"].size()})

    s = side(source_ops, al.source_times.values, al.source_group)
    t = side(target_ops, al.target_times.values, al.target_group)
    df = s.add_suffix("_s").join(t.add_suffix("_t"), how="outer").fillna(0.0)
    out = pd.DataFrame({
        "key": df.index.astype(str),
        "source_us": df["us_s"].to_numpy(), "target_us": df["us_t"].to_numpy(),
        "source_unmatched_us": df["unmatched_us_s"].to_numpy(), "target_unmatched_us": df["unmatched_us_t"].to_numpy(),
        "source_count": df["count_s"].astype(int).to_numpy(), "target_count": df["count_t"].astype(int).to_numpy(),
    })
    out = out[(out["source_us"] > 0) | (out["target_us"] > 0)]
    return _finish(out, al.target_times.total - al.source_times.total)


_INSTANCE = re.compile(r"_\d+$")


def module_kind(module: str) -> str:
    """A module path with instance numbers folded: every decoder layer's attention is one kind.

    'Model_0/Layer_3/Attention_3' -> 'Model/Layer/Attention'; 'blocks/3/attn' -> 'blocks/*/attn'.
    """
    return "/".join("*" if p.isdigit() else _INSTANCE.sub("", p) for p in module.split("/")) if module else ""


def with_module_kind(ops: pd.DataFrame) -> pd.DataFrame:
    kinds = {m: module_kind(m) for m in ops["module"].unique().tolist()}  # a few hundred paths, many ops each
    return ops.assign(module_kind=ops["module"].map(kinds).to_numpy(dtype=object))


@dataclass
class EndToEnd:
    source: Samples  # charged time per step
    target: Samples
    source_outside_steps_us: float
    target_outside_steps_us: float
    source_total_us: float  # whole trace
    target_total_us: float
    source_wall: Samples | None = None  # seconds per step, from a live capture's timing samples
    target_wall: Samples | None = None

    source_has_steps: bool = True
    target_has_steps: bool = True
    # busy time (union of kernel intervals, porter.analysis.busy) where streams overlap: per
    # step and whole trace; None when the kernel sum is the basis
    source_busy: Samples | None = None
    target_busy: Samples | None = None
    source_busy_total_us: float | None = None
    target_busy_total_us: float | None = None

    @property
    def basis(self) -> str:
        """'per_step' when both traces mark steps; else 'whole_trace' (one side's steps are unknown)."""
        return "per_step" if self.source_has_steps and self.target_has_steps else "whole_trace"

    @property
    def uses_busy(self) -> bool:
        if self.basis == "per_step":
            return bool(self.source_busy and self.target_busy and self.source_busy.n and self.target_busy.n)
        return bool(self.source_busy_total_us and self.target_busy_total_us)

    @property
    def kernel_sum_ratio(self) -> float:
        """Target over source by summed charged time: per-step medians, or whole traces."""
        if self.basis == "per_step":
            return _ratio(self.source.median, self.target.median)
        return _ratio(self.source_total_us, self.target_total_us)

    @property
    def ratio(self) -> float:
        """Target over source (>1: the target is slower): busy time where streams overlap
        (summed kernels would count concurrent work twice), else the kernel sum."""
        if not self.uses_busy:
            return self.kernel_sum_ratio
        if self.basis == "per_step":
            return _ratio(self.source_busy.median, self.target_busy.median)
        return _ratio(self.source_busy_total_us, self.target_busy_total_us)

    def with_busy(self, block: Mapping[str, Any] | None) -> "EndToEnd":
        """This, with busy time from porter.analysis.busy.busy_block when streams overlap."""
        if not block or not block.get("streams_overlap"):
            return self
        per = {r: Samples(tuple(float(x) for x in (block[r].get("per_step_busy_us") or ()))) for r in ("source", "target")}
        return replace(self, source_busy=per["source"], target_busy=per["target"],
                       source_busy_total_us=float(block["source"]["busy_us"]),
                       target_busy_total_us=float(block["target"]["busy_us"]))

    @property
    def wall_ratio(self) -> float | None:
        if self.source_wall is None or self.target_wall is None:
            return None
        return _ratio(self.source_wall.median, self.target_wall.median)

    def to_dict(self) -> dict:
        return {
            "ratio": self.ratio,
            "ratio_basis": self.basis,
            "ratio_time": "busy" if self.uses_busy else "kernel_sum",
            "kernel_sum_ratio": self.kernel_sum_ratio,
            "source_per_step_busy_us": self.source_busy.to_dict() if self.source_busy else None,
            "target_per_step_busy_us": self.target_busy.to_dict() if self.target_busy else None,
            "source_per_step_us": self.source.to_dict(),
            "target_per_step_us": self.target.to_dict(),
            "source_outside_steps_us": self.source_outside_steps_us,
            "target_outside_steps_us": self.target_outside_steps_us,
            "source_total_us": self.source_total_us,
            "target_total_us": self.target_total_us,
            "total_ratio": _ratio(self.source_total_us, self.target_total_us),
            "wall_ratio": self.wall_ratio,
            "source_wall_s": self.source_wall.to_dict() if self.source_wall else None,
            "target_wall_s": self.target_wall.to_dict() if self.target_wall else None,
        }


def _measured_steps(al: Alignment, side: str, ops: pd.DataFrame) -> tuple[Samples, float]:
    """Each step's time as the profiler measured it. A live pair's aligned times are each op
    call's median over the steps (porter.analysis.step_median), whose step totals are all
    equal: a spread of 0% and an interval of width 0. So where the alignment took medians, the
    steps are summed from the aligned ops' own times (after fused kernels were split, which
    only moves time between ops)."""
    if al.stats.get(f"{side}_step_median_calls"):
        aligned = al.source_ops if side == "source" else al.target_ops
        return step_totals(aligned, op_times(aligned).values)
    return step_totals(ops, (al.source_times if side == "source" else al.target_times).values)


def end_to_end(al: Alignment, source_ops: pd.DataFrame, target_ops: pd.DataFrame,
               source_wall: Samples | None = None, target_wall: Samples | None = None) -> EndToEnd:
    s, s_out = _measured_steps(al, "source", source_ops)
    t, t_out = _measured_steps(al, "target", target_ops)
    return EndToEnd(s, t, s_out, t_out, al.source_times.total, al.target_times.total, source_wall, target_wall,
                    bool((source_ops["step"] >= 0).any()), bool((target_ops["step"] >= 0).any()))
