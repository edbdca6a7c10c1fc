"""What each matched group does, per side: kernels, FLOPs, bytes, dtype and shapes.

The perf model and the fix catalogue reason about groups, but costs come per op
(porter.analysis.opcost). Profilers record nested ops (aten::linear around aten::addmm), and both
carry a cost estimate, so summing every op would count a GEMM twice. An op's *self cost*
is its estimate minus its direct children's (clipped at 0), the cost analogue of self
time: a parent that only wraps its children keeps nothing, and the sum over a subtree is
the work done once. A group then sums the self costs of its ops that own kernels
(``kernel_count > 0``; every op when a trace has no kernels at all), as ``device_us`` is
self time too.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from porter.analysis.opcost import FLOAT_DTYPES, canonical_dtype, op_costs

FACTS = ("kernels", "flops", "bytes", "dtype", "input_shapes", "dtypes", "framework_ops")


def self_costs(ops: pd.DataFrame) -> pd.DataFrame:
    """flops, bytes (own estimate minus direct children's, >= 0) and dtype per op, indexed by op_id."""
    c = op_costs(ops)
    own = pd.DataFrame({"flops": c["flops"].to_numpy(), "bytes": c["bytes"].to_numpy()}, index=ops["op_id"].to_numpy())
    parent = ops["parent_id"].to_numpy()
    has_parent = parent >= 0
    kids = own[has_parent].fillna(0.0).groupby(parent[has_parent]).sum()
    kids = kids.reindex(own.index).fillna(0.0)
    out = (own - kids).clip(lower=0.0)  # NaN own estimates stay NaN
    out["dtype"] = [canonical_dtype(d) or d for d in c["dtype"].tolist()]
    return out


def _members(ids: pd.Series) -> pd.DataFrame:
    """(group_id, op_id) pairs from a Series group_id -> list of op ids."""
    g = ids.explode().dropna()
    return pd.DataFrame({"group_id": g.index.to_numpy(), "op_id": g.to_numpy().astype(np.int64)})


def distinct_in_order(keys: pd.Series, values: pd.Series) -> pd.Series:
    """key -> tuple of its non-empty values, first appearance first, in one pass over
    de-duplicated pairs (a groupby.agg with a Python callable pays pandas' per-group cost)."""
    pairs = pd.DataFrame({"k": keys.to_numpy(), "v": values.to_numpy(dtype=object)})
    pairs = pairs[pairs["v"].astype(bool)].drop_duplicates()
    out: dict = {}
    for k, v in zip(pairs["k"].tolist(), pairs["v"].tolist()):
        out.setdefault(k, []).append(v)
    return pd.Series({k: tuple(v) for k, v in out.items()}, dtype=object)


def group_facts(ids: pd.Series, ops: pd.DataFrame, times: pd.Series) -> pd.DataFrame:
    """One row per group (index = ids.index): see FACTS.

    ids: group_id -> op ids of one side; times: op_id -> charged time (porter.analysis.optime).
    dtype is the float dtype of the group's costliest op; input_shapes/dtypes are those
    of its most expensive op by time that recorded shapes ('' when none did).
    """
    m = _members(ids)
    if m.empty:
        return pd.DataFrame({k: pd.Series(dtype=object) for k in FACTS}, index=ids.index)
    cost = self_costs(ops)
    o = ops.set_index("op_id")
    m["kernels"] = o["kernel_count"].reindex(m["op_id"]).fillna(0).to_numpy(np.int64)
    m["time"] = times.reindex(m["op_id"]).fillna(0.0).to_numpy()
    for col in ("flops", "bytes", "dtype"):
        m[col] = cost[col].reindex(m["op_id"]).to_numpy()
    for col in ("input_shapes", "dtypes", "framework_op"):
        m[col] = o[col].reindex(m["op_id"]).fillna("").to_numpy(dtype=object)
    owns = m["kernels"] > 0 if (ops["kernel_count"] > 0).any() else pd.Series(True, index=m.index)
    m.loc[~owns, ["flops", "bytes"]] = np.nan
    by = m.groupby("group_id", sort=False)
    out = pd.DataFrame({
        "kernels": by["kernels"].sum(),
        "flops": by["flops"].sum(min_count=1),
        "bytes": by["bytes"].sum(min_count=1),
    })
    floats = m[m["dtype"].isin(FLOAT_DTYPES)]
    heavy_cost = floats.assign(w=floats["flops"].fillna(0) + floats["bytes"].fillna(0)).sort_values("w", ascending=False, kind="stable")
    out["dtype"] = heavy_cost.groupby("group_id", sort=False)["dtype"].first()
    shaped = m[m["input_shapes"] != ""].sort_values("time", ascending=False, kind="stable").groupby("group_id", sort=False).first()
    out["input_shapes"] = shaped["input_shapes"]
    out["dtypes"] = shaped["dtypes"]
    out["framework_ops"] = distinct_in_order(m["group_id"], m["framework_op"])
    out = out.reindex(ids.index)
    for col in ("dtype", "input_shapes", "dtypes"):
        out[col] = out[col].fillna("")
    out["framework_ops"] = [v if isinstance(v, tuple) else () for v in out["framework_ops"]]
    out["kernels"] = out["kernels"].fillna(0).astype(np.int64)
    return out
