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
from porter.analysis.groups import UNMATCHED

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

    Columns: the key, op_class, source/target count, total us and mean us, delta_us, ratio (NaN
    for a row on one side only, which only_on names: "source", "target" or ""),
    target_roofline_us and target_efficiency (roofline / target time over ops with known
    costs; NaN when none; at most 1), target_observed_bound (some of its calls ran faster than
    the ceiling allows: their observed time is the bound), module_kinds, target_ops (the target's
    own op names where a cross-framework pair keys its ops as the source's: in_source_terms).
    """
    rl = target_roofline_per_op(al, roofline_groups) if roofline_groups is not None else None
    s = _side(al.source_ops, al.source_times.values)
    t = in_source_terms(s, _side(al.target_ops, al.target_times.values, rl), al)
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
        # a row that ran on one side only has no ratio ("0.00x" read as an infinite speed-up)
        out["ratio"] = np.where((out["source_us"] > 0) & (out["target_count"] > 0), out["target_us"] / out["source_us"], np.nan)
    out["only_on"] = np.where(out["target_count"] == 0, "source", np.where(out["source_count"] == 0, "target", ""))
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
    own = _own_names(t)
    out["target_ops"] = [own.get(tuple(k), []) for k in out[KEY].itertuples(index=False, name=None)]
    out = out.reindex(out["delta_us"].abs().sort_values(ascending=False, kind="stable").index)
    cols = KEY + ["op_class", "source_count", "target_count", "source_us", "target_us", "source_mean_us",
                  "target_mean_us", "delta_us", "ratio", "target_roofline_us", "target_efficiency",
                  "target_observed_bound", "module_kinds", "target_ops", "only_on"]
    return out[cols].reset_index(drop=True)


# a group's source key holding more than this share of its source time speaks for the group: a
# linear's addmm held 68% of its group on the demo, the rest the view, t and copy_ around it
DOMINANT = 0.5
# a pair is cross-framework when more than this share of the target's time runs in ops the
# source never names (cpu -> xla: 100%; the H100 -> MI300X Qwen pair: its own ops pair by name)
CROSS = 0.5


def in_source_terms(s: pd.DataFrame, t: pd.DataFrame, al: Alignment) -> pd.DataFrame:
    """Target ops named in a vocabulary the source never uses (XLA's dot_general for eager's
    aten::addmm, an inductor kernel for the ops it fused) keyed as the source op of their matched
    group, so a cross-framework table pairs them in one row instead of two one-sided ones. The
    group's alignment already paired them (module, call identity); the key is the source op's
    that holds most of the group's source time (DOMINANT), and a group without one keeps the target's
    names. ``own_op`` keeps each target op's own name (the row's target_ops)."""
    t = t.assign(own_op=t["framework_op"].to_numpy())
    foreign = ~t["framework_op"].isin(set(s["framework_op"])).to_numpy()
    total = float(t["us"].sum())
    if s.empty or total <= 0 or float(t["us"].to_numpy()[foreign].sum()) <= CROSS * total:
        return t  # one vocabulary on both sides (H100 -> MI300X): each side's own op names pair
    sg = al.source_group.reindex(al.source_ops["op_id"].to_numpy()).to_numpy()
    tg = al.target_group.reindex(al.target_ops["op_id"].to_numpy()).to_numpy()
    f = s[KEY + ["us"]].assign(group=sg)
    f = f[pd.notna(f["group"]) & (f["group"] != UNMATCHED)]
    if f.empty:
        return t
    per = f.groupby(["group"] + KEY, sort=False)["us"].sum().reset_index()
    total = per.groupby("group")["us"].transform("sum")
    per = per.assign(share=np.where(total > 0, per["us"] / total.where(total > 0, 1.0), 0.0))
    top = per.sort_values("us", ascending=False, kind="stable").drop_duplicates("group")
    top = top[top["share"] > DOMINANT].set_index("group")
    hit = foreign & pd.Series(tg).isin(top.index).to_numpy()
    if hit.any():
        _rekey(t, hit, top.reindex(tg[hit]))
    # a group without a majority (an attention block: bmm, softmax, masked_fill): a target op
    # takes the heaviest source key of its group with its class and tensor shapes (XLA's
    # dot_general [[8,64,32],[8,32,64]] is the block's aten::bmm of those shapes)
    rest = foreign & ~hit
    if rest.any():
        f = f.assign(op_class=s.loc[f.index, "op_class"].to_numpy(), tensors=_tensor_shapes(f["input_shapes"]))
        by = (f.groupby(["group", "op_class", "tensors"] + KEY, sort=False)["us"].sum().reset_index()
              .sort_values("us", ascending=False, kind="stable").drop_duplicates(["group", "op_class", "tensors"])
              .set_index(["group", "op_class", "tensors"]))
        want = pd.MultiIndex.from_arrays([tg[rest], t["op_class"].to_numpy(dtype=object)[rest],
                                          _tensor_shapes(t["input_shapes"][rest])])
        found = by.reindex(want)
        ok = found[KEY[0]].notna().to_numpy()
        idx = np.flatnonzero(rest)[ok]
        if len(idx):
            mask = np.zeros(len(t), dtype=bool)
            mask[idx] = True
            _rekey(t, mask, found[ok])
    return t


def _rekey(t: pd.DataFrame, mask: np.ndarray, keys: pd.DataFrame) -> None:
    for c in KEY:
        col = t[c].to_numpy(dtype=object).copy()
        col[mask] = keys[c].to_numpy(dtype=object)
        t[c] = col


def _tensor_shapes(shapes: pd.Series) -> np.ndarray:
    """The tensor arguments' shapes of a compact shapes list, scalars ([]) left out: eager's
    '[[2,4,64,64],[],[]]' and XLA's '[[2,4,64,64]]' are the same tensors."""
    def one(text: str) -> str:
        try:
            dims = json.loads(text) if text else []
        except ValueError:
            return text
        return json.dumps([d for d in dims if d], separators=(",", ":")) if isinstance(dims, list) else text
    return _per_unique(shapes.to_numpy(dtype=object), one)


def _own_names(t: pd.DataFrame) -> dict[tuple, list[str]]:
    """Per key: the target's own op names where they differ from the key's (heaviest first, at
    most MODULE_KINDS_SHOWN): what ran for aten::addmm on XLA."""
    other = t[t["own_op"] != t["framework_op"]]
    if other.empty:
        return {}
    k = other.groupby(KEY + ["own_op"], sort=False)["us"].sum().reset_index().sort_values("us", ascending=False, kind="stable")
    out: dict[tuple, list[str]] = {}
    for key, name in zip(zip(*(k[c].tolist() for c in KEY)), k["own_op"].tolist()):
        names = out.setdefault(key, [])
        if len(names) < MODULE_KINDS_SHOWN:
            names.append(str(name))
    return out


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
    # keyed as the op table is: a cross-framework pair's dot_general nets against its addmm
    # (unpaired, a class read "slower on matrix multiplies (+2.93 ms) and faster (-3.41 ms)")
    t = in_source_terms(s, side(al.target_ops, target_ops, al.target_times.values), al)
    key = ["op_class"] + KEY
    a = s.groupby(key)["us"].sum()
    b = t.groupby(key)["us"].sum()
    d = b.sub(a, fill_value=0.0)
    per = pd.DataFrame({"gross_loss_us": d.clip(lower=0.0), "gross_win_us": d.clip(upper=0.0)})
    return per.groupby(level="op_class").sum()
