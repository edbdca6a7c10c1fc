"""Time per (framework op, input shapes, dtypes) on both sides: the table porting engineers sort.

A matched group can hold one call; the same GEMM shape is called hundreds of times, so a
per-shape row (count, total and mean per side, gap, ratio) says where a kernel choice costs
time. Each side keeps its own ops (matched or not), so the rows sum to each side's total.
Per op class, ``class_gross`` splits the net gap into what the slower shapes lose and the
faster ones win: a class that nets to zero can still hide one shape that is 28x slower.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from porter.analysis.align import Alignment
from porter.analysis.attribute import module_kind

KEY = ["framework_op", "input_shapes", "dtypes"]
MODULE_KINDS_SHOWN = 3  # the heaviest module kinds a row names; more would not fit a table cell


def compact(text: str) -> str:
    """A recorded shapes/dtypes JSON list on one line ('[[8944,1024],[1024,2816]]'); '' stays ''."""
    if not text:
        return ""
    try:
        return json.dumps(json.loads(text), separators=(",", ":"))
    except ValueError:
        return " ".join(text.split())


def _per_unique(values: np.ndarray, fn) -> np.ndarray:
    """fn applied once per distinct value (hashing, not sorting: ops repeat a few shapes)."""
    codes, uniques = pd.factorize(values)
    return np.array([fn(u) for u in uniques], dtype=object)[codes]


def _side(ops: pd.DataFrame, times: pd.Series, roofline_us: pd.Series | None = None,
          kinds: bool = True) -> pd.DataFrame:
    """One row per op with its key columns, class, module kind, time (and roofline share)."""
    ids = ops["op_id"].to_numpy()
    op = ops["framework_op"].to_numpy(dtype=object)
    out = pd.DataFrame({
        "framework_op": np.where(op == "", ops["name"].to_numpy(dtype=object), op),
        "input_shapes": _per_unique(ops["input_shapes"].to_numpy(dtype=object), compact),
        "dtypes": _per_unique(ops["dtypes"].to_numpy(dtype=object), compact),
        "op_class": ops["op_class"].to_numpy(dtype=object),
        "us": times.reindex(ids).fillna(0.0).to_numpy(),
    })
    if kinds:
        out["module_kind"] = _per_unique(ops["module"].to_numpy(dtype=object), module_kind)
    if roofline_us is not None:
        out["roofline_us"] = roofline_us.reindex(ids).to_numpy()
    return out


def target_roofline_per_op(al: Alignment, groups: pd.DataFrame) -> pd.Series:
    """Each matched group's target roofline time shared among its target ops by their time.

    groups: group_id, roofline_us (porter.analysis.roofline.group_roofline). Ops of a group
    without a roofline (unknown costs) get NaN, so efficiency is computed over known work only.
    """
    rl = groups.set_index("group_id")["roofline_us"]
    member = al.target_group
    t = al.target_times.values.reindex(member.index).fillna(0.0)
    per_group = t.groupby(member).transform("sum")
    share = np.where(per_group > 0, t / per_group.where(per_group > 0, 1.0), 0.0)
    return pd.Series(rl.reindex(member.to_numpy()).to_numpy() * share, index=member.index)


def observed_per_op(al: Alignment, groups: pd.DataFrame) -> pd.Series:
    """Per target op: whether its group's roofline is the observed time (the target beat the
    ceiling there: porter.analysis.roofline.observed_bound)."""
    if "roofline_basis" not in groups.columns:
        return pd.Series(False, index=al.target_group.index)
    observed = groups.set_index("group_id")["roofline_basis"].eq("observed")
    member = al.target_group
    return pd.Series(observed.reindex(member.to_numpy()).fillna(False).to_numpy(bool), index=member.index)


def _kinds(f: pd.DataFrame) -> dict[tuple, list[str]]:
    """Per key: the heaviest module kinds it runs in (both sides), as a list. One pass over
    the sorted (key, kind) sums (a groupby.agg with a Python callable pays per group)."""
    k = f[f["module_kind"] != ""].groupby(KEY + ["module_kind"], sort=False)["us"].sum().reset_index()
    k = k.sort_values("us", ascending=False, kind="stable")
    out: dict[tuple, list[str]] = {}
    for key, kind in zip(zip(*(k[c].tolist() for c in KEY)), k["module_kind"].tolist()):
        kinds = out.setdefault(key, [])
        if len(kinds) < MODULE_KINDS_SHOWN:
            kinds.append(kind)
    return out


def op_shape_table(al: Alignment, roofline_groups: pd.DataFrame | None = None) -> pd.DataFrame:
    """Rows per (framework_op, input_shapes, dtypes), largest absolute gap first.

    Columns: the key, op_class, source/target count, total us and mean us, delta_us, ratio,
    target_roofline_us and target_efficiency (roofline / target time over ops with known
    costs; NaN when none; at most 1), target_observed_bound (some of its calls ran faster than
    the ceiling allows: their observed time is the bound), module_kinds.
    """
    rl = target_roofline_per_op(al, roofline_groups) if roofline_groups is not None else None
    s = _side(al.source_ops, al.source_times.values)
    t = _side(al.target_ops, al.target_times.values, rl)
    if roofline_groups is not None:
        t["observed"] = observed_per_op(al, roofline_groups).reindex(al.target_ops["op_id"].to_numpy()).fillna(False).to_numpy(bool)
    both = pd.concat([s.assign(side="source"), t.assign(side="target")], ignore_index=True)
    agg = both.groupby(KEY + ["side"], sort=False).agg(us=("us", "sum"), count=("us", "size")).unstack("side")
    agg.columns = [f"{side}_{what}" for what, side in agg.columns]
    for col in ("source_us", "target_us", "source_count", "target_count"):
        if col not in agg:
            agg[col] = 0.0
    agg = agg.fillna(0.0)
    cls = both.sort_values("us", ascending=False, kind="stable").groupby(KEY, sort=False)["op_class"].first()
    out = agg.join(cls).reset_index()
    out["source_count"] = out["source_count"].astype(int)
    out["target_count"] = out["target_count"].astype(int)
    out = out[(out["source_us"] > 0) | (out["target_us"] > 0)].copy()
    with np.errstate(divide="ignore", invalid="ignore"):
        out["source_mean_us"] = np.where(out["source_count"] > 0, out["source_us"] / out["source_count"], np.nan)
        out["target_mean_us"] = np.where(out["target_count"] > 0, out["target_us"] / out["target_count"], np.nan)
        out["delta_us"] = out["target_us"] - out["source_us"]
        out["ratio"] = np.where(out["source_us"] > 0, out["target_us"] / out["source_us"], np.nan)
    if rl is not None:
        known = t[t["roofline_us"].notna()]
        r = known.groupby(KEY, sort=False).agg(target_roofline_us=("roofline_us", "sum"), known_us=("us", "sum"),
                                               target_observed_bound=("observed", "any"))
        out = out.merge(r, how="left", left_on=KEY, right_index=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            out["target_efficiency"] = np.where(out["known_us"] > 0, out["target_roofline_us"] / out["known_us"], np.nan)
        out = out.drop(columns=["known_us"])
        out["target_observed_bound"] = out["target_observed_bound"].fillna(False).astype(bool)
    else:
        out["target_roofline_us"] = np.nan
        out["target_efficiency"] = np.nan
        out["target_observed_bound"] = False
    kinds = _kinds(both)
    out["module_kinds"] = [kinds.get(tuple(k), []) for k in out[KEY].itertuples(index=False, name=None)]
    out = out.reindex(out["delta_us"].abs().sort_values(ascending=False, kind="stable").index)
    cols = KEY + ["op_class", "source_count", "target_count", "source_us", "target_us", "source_mean_us",
                  "target_mean_us", "delta_us", "ratio", "target_roofline_us", "target_efficiency",
                  "target_observed_bound", "module_kinds"]
    return out[cols].reset_index(drop=True)


def class_gross(al: Alignment, source_ops: pd.DataFrame, target_ops: pd.DataFrame) -> pd.DataFrame:
    """Per op class: gross loss (sum of the gaps of shapes slower on the target) and gross win
    (sum of the faster ones, negative); their sum is the class's net gap.

    Shapes are keyed with their class on each side, so the split never moves time between
    classes; the class is the one source_ops/target_ops (the bundles' own, which the class
    roll-up sums) give each op.
    """
    def side(aligned: pd.DataFrame, own: pd.DataFrame, times: pd.Series) -> pd.DataFrame:
        f = _side(aligned, times, kinds=False)  # the aligned ops: kernel-only ops carry the op they ran for
        f["op_class"] = own.set_index("op_id")["op_class"].reindex(aligned["op_id"].to_numpy()).fillna("other").to_numpy()
        return f

    s = side(al.source_ops, source_ops, al.source_times.values)
    t = side(al.target_ops, target_ops, al.target_times.values)
    key = ["op_class"] + KEY
    a = s.groupby(key)["us"].sum()
    b = t.groupby(key)["us"].sum()
    d = b.sub(a, fill_value=0.0)
    per = pd.DataFrame({"gross_loss_us": d.clip(lower=0.0), "gross_win_us": d.clip(upper=0.0)})
    return per.groupby(level="op_class").sum()
