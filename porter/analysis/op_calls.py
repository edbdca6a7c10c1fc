"""Live pairs: each op call's time on both stacks, paired by identity (module, op, call index).

Module groups (porter.analysis.align_identity) say which module is slower; inside a module
this table says which call: the source's calls keyed by the profiler tree
(porter.analysis.call_identity: a wrapper's compute child carries its wrapper's call), the
target's by the call its capture recorded (the ``call`` column: torchax's HLO op_name tags,
porter.targets.call_tags; inductor's FX provenance, porter.targets.inductor_attribution) or,
for an eager target, by its tree (a torch.compile target's aten ops are its graph's
decomposition, not the calls eager made, so its tree is never used). Times are per
step (each call's step medians summed over the steps, over the number of steps). A fusion's
estimated share placed on a module other than its root call's is that module's ``fused#0``.

Evidence per row: ``identity-call`` (both sides ran the call), ``fused-share`` (some of the
target's time is an estimated share of a fusion split among modules,
porter.analysis.split_fused), ``source-only`` (the target did this call's work inside another
call's fused op, or none: a view, eval-mode dropout), ``target-only``. Only modules where
both sides carry call identities are listed; elsewhere (ORT, untagged kernels such as a fused
SDPA a rewrite made) the module group is the finest pairing.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from porter.analysis.align_identity import RUNTIME_RANGES
from porter.analysis.call_identity import call_keys
from porter.analysis.optime import OpTimes

IDENTITY_CALL = "identity-call"
FUSED_SHARE = "fused-share"
SOURCE_ONLY = "source-only"
TARGET_ONLY = "target-only"
FUSED_OP = "fused"  # the op name of a module's estimated share of fusions rooted in another call
COLUMNS = ["module", "op", "call", "source_us", "target_us", "ratio", "evidence"]


def side_calls(ops: pd.DataFrame, times: OpTimes) -> pd.DataFrame:
    """One row per (module, op, k): its time per step and whether any of it is a split share."""
    compiled = ops["name"].astype(str).str.startswith(RUNTIME_RANGES).any()
    # a compiled side's aten ops are what its graph decomposed to (an inductor ``aten::addmm``
    # extern kernel is not the ``linear`` call eager made): its tree names no calls
    keys = call_keys(ops.iloc[:0] if compiled else ops).set_index("op_id")
    tagged = ops.loc[ops["call"].astype(str) != "", ["op_id", "module", "call"]] if "call" in ops.columns else ops.iloc[:0]
    if len(tagged):  # tags written by the capture stack win over the tree
        op_k = tagged["call"].str.rpartition("#")
        tag = pd.DataFrame({"module": tagged["module"].to_numpy(), "op": op_k[0].to_numpy(),
                            "k": pd.to_numeric(op_k[2]).to_numpy(), "top": True}, index=tagged["op_id"].to_numpy())
        keys = pd.concat([keys.drop(index=tag.index, errors="ignore"), tag])
        # a fusion's share placed on another module carries no call of its own: one row per module
        shares = ops.loc[(ops["call"].astype(str) == "")
                         & ops["name"].astype(str).str.contains("[share of", regex=False), ["op_id", "module"]]
        keys = pd.concat([keys.drop(index=shares["op_id"], errors="ignore"),
                          pd.DataFrame({"module": shares["module"].to_numpy(), "op": FUSED_OP, "k": 0, "top": True},
                                       index=shares["op_id"].to_numpy())])
    if keys.empty:
        return pd.DataFrame(columns=["module", "op", "k", "us", "share"])
    named = ops.set_index("op_id")
    t = times.values.reindex(keys.index).fillna(0.0).to_numpy()
    share = named["name"].reindex(keys.index).astype(str).str.contains("[share of", regex=False).to_numpy()
    steps = max(1, int(pd.unique(ops.loc[ops["step"] >= 0, "step"]).size))
    f = pd.DataFrame({"module": keys["module"].to_numpy(), "op": keys["op"].to_numpy(),
                      "k": keys["k"].astype(np.int64).to_numpy(), "us": t / steps, "share": share & (t > 0)})
    return f.groupby(["module", "op", "k"], as_index=False, sort=False).agg(us=("us", "sum"), share=("share", "any"))


def op_call_table(source_ops: pd.DataFrame, source_times: OpTimes,
                  target_ops: pd.DataFrame, target_times: OpTimes) -> pd.DataFrame:
    """See the module doc: rows sorted by module, then by the larger side's time."""
    s, t = side_calls(source_ops, source_times), side_calls(target_ops, target_times)
    both = set(s["module"]) & set(t["module"])
    s, t = s[s["module"].isin(both)], t[t["module"].isin(both)]
    m = s.merge(t, on=["module", "op", "k"], how="outer", suffixes=("_s", "_t"))
    if m.empty:
        return pd.DataFrame(columns=COLUMNS)
    su, tu = m["us_s"].fillna(0.0).to_numpy(), m["us_t"].fillna(0.0).to_numpy()
    m = m[(su > 0) | (tu > 0)]
    su, tu = m["us_s"].fillna(0.0).to_numpy(), m["us_t"].fillna(0.0).to_numpy()
    shared = m["share_t"].fillna(False).astype(bool).to_numpy()
    evidence = np.where(shared, FUSED_SHARE, np.where((su > 0) & (tu > 0), IDENTITY_CALL,
                                                      np.where(su > 0, SOURCE_ONLY, TARGET_ONLY)))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where((su > 0) & (tu > 0), tu / np.where(su > 0, su, 1.0), np.nan)
    out = pd.DataFrame({"module": m["module"].to_numpy(), "op": m["op"].to_numpy(),
                        "call": m["k"].astype(np.int64).to_numpy(), "source_us": su, "target_us": tu,
                        "ratio": ratio, "evidence": evidence})
    out["_big"] = np.maximum(su, tu)
    return out.sort_values(["module", "_big"], ascending=[True, False]).drop(columns="_big").reset_index(drop=True)
