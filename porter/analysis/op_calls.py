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

A fused op that holds several op calls (``ops.call_members``: every member instruction of an
XLA fusion, the FX nodes of an inductor kernel, the original nodes an ORT fused node
replaced) is split among those calls by the other side's measured time for each same call
where it pairs, else by estimated cost (fused_call_shares), each row's estimated part kept
as ``estimated_us``.

Evidence per row: ``identity-call`` (both sides ran the call, under half of the target's time
estimated: a dense layer's GEMM that ran alone stays identity-call when only its bias add was
fused with the next call), ``fused-share`` (at least half of the target's time is an estimated
share of a fusion split among modules or calls, porter.analysis.split_fused and
fused_call_shares), ``fused-measured`` (at least half of it is a share of a fusion priced by
the source's measured time for the same call: the call's work ran fused, its share is not a
guess), ``source-only`` (the target did this call's work inside another
call's fused op, or none: a view, eval-mode dropout), ``target-only``. Only modules where
both sides carry call identities are listed; elsewhere (untagged kernels such as a fused SDPA
a rewrite made) the module group is the finest pairing. ORT's calls come from the exporter's
FX node of each ONNX node (porter.targets.onnx_calls).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from porter.analysis.outside import RUNTIME_RANGES
from porter.analysis.call_identity import call_keys
from porter.analysis.fused_shares import decode
from porter.analysis.optime import OpTimes

IDENTITY_CALL = "identity-call"
FUSED_SHARE = "fused-share"
FUSED_MEASURED = "fused-measured"
SOURCE_ONLY = "source-only"
TARGET_ONLY = "target-only"
ESTIMATED_MAJORITY = 0.5  # a row is fused-share when at least this much of its target time is estimated
FUSED_OP = "fused"  # the op name of a module's estimated share of fusions rooted in another call
COLUMNS = ["module", "op", "call", "source_us", "target_us", "ratio", "evidence", "estimated_us"]


def side_calls(ops: pd.DataFrame, times: OpTimes) -> pd.DataFrame:
    """One row per (module, op, k): its time per step (us) and how much of it is an estimated
    share of a fused op (est)."""
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
    fused = fused_call_shares(ops, times)
    if len(fused):  # a fusion holding several calls: its time is theirs, by estimated share
        keys = keys.drop(index=pd.unique(fused["fused_ids"].explode()), errors="ignore")
    if keys.empty and fused.empty:
        return pd.DataFrame(columns=["module", "op", "k", "us", "est", "shared"])
    named = ops.set_index("op_id")
    t = times.values.reindex(keys.index).fillna(0.0).to_numpy()
    name = named["name"].reindex(keys.index).astype(str)
    share = name.str.contains("[share of", regex=False).to_numpy()
    guess = share & name.str.endswith(", estimated]").to_numpy()
    steps = max(1, int(pd.unique(ops.loc[ops["step"] >= 0, "step"]).size))
    f = pd.DataFrame({"module": keys["module"].to_numpy(), "op": keys["op"].to_numpy(),
                      "k": keys["k"].astype(np.int64).to_numpy(), "us": t / steps,
                      "est": np.where(guess, t / steps, 0.0), "shared": np.where(share, t / steps, 0.0)})
    if len(fused):
        f = pd.concat([f, pd.DataFrame({"module": fused["module"], "op": fused["op"], "k": fused["k"].astype(np.int64),
                                        "us": fused["us"] / steps, "est": fused["est"] / steps,
                                        "shared": fused["us"] / steps})], ignore_index=True)
    return f.groupby(["module", "op", "k"], as_index=False, sort=False).agg(us=("us", "sum"), est=("est", "sum"),
                                                                          shared=("shared", "sum"))


def fused_call_shares(ops: pd.DataFrame, times: OpTimes) -> pd.DataFrame:
    """Each fused op that holds several op calls (``ops.call_members``: an XLA fusion's member
    instructions, an inductor kernel's FX nodes, an ORT node that replaced a Conv, its BatchNorm
    and its ReLU) split among
    them by each call's share: the one split_fused priced by the other side's measured time
    for the same call (``call_split``, porter.analysis.fused_shares), else its estimated share
    of the cost. One row per (fused op, member call) with the fusion's charged time (its own and
    its module shares', porter.analysis.split_fused) times the share, shares normalised to sum
    to 1. Columns: op_id, module, op, k, us (over all steps), est (the part of us placed by
    estimate), fused_ids (the rows whose time it is)."""
    cols = ["op_id", "module", "op", "k", "us", "est", "fused_ids"]
    if "call_members" not in ops.columns:
        return pd.DataFrame(columns=cols)
    name = ops["name"].astype(str)
    own = ops.loc[(ops["call_members"].astype(str) != "") & ~name.str.contains("[share of", regex=False)]
    if own.empty:
        return pd.DataFrame(columns=cols)
    shares = ops.loc[name.str.contains("[share of", regex=False) & ops["parent_id"].isin(own["op_id"]),
                     ["op_id", "parent_id"]]
    children = shares.groupby("parent_id")["op_id"].agg(list)
    rows = []
    split = own["call_split"].astype(str).to_numpy() if "call_split" in own.columns else np.full(len(own), "")
    for r, by_split in zip(own.itertuples(index=False), split):
        ids = [r.op_id, *children.get(r.op_id, [])]
        total = float(times.values.reindex(ids).fillna(0.0).sum())
        members = ([(c.module, c.call, c.share, c.measured) for c in decode(by_split)] if by_split else
                   [(module, call, share, False) for module, call, share in json.loads(r.call_members)])
        norm = sum(m[2] for m in members) or 1.0
        for module, call, share, measured in members:
            op, _, k = call.rpartition("#")
            us = total * share / norm
            rows.append((r.op_id, module, op, int(k), us, 0.0 if measured else us, ids))
    return pd.DataFrame(rows, columns=cols)


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
    est, fz = m["est_t"].fillna(0.0).to_numpy(), m["shared_t"].fillna(0.0).to_numpy()
    shared = (est > 0) & (est >= ESTIMATED_MAJORITY * tu)
    timed = ~shared & (fz > 0) & (fz >= ESTIMATED_MAJORITY * tu) & (su > 0)
    evidence = np.where(shared, FUSED_SHARE, np.where(timed, FUSED_MEASURED, np.where(
        (su > 0) & (tu > 0), IDENTITY_CALL, np.where(su > 0, SOURCE_ONLY, TARGET_ONLY))))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where((su > 0) & (tu > 0), tu / np.where(su > 0, su, 1.0), np.nan)
    out = pd.DataFrame({"module": m["module"].to_numpy(), "op": m["op"].to_numpy(),
                        "call": m["k"].astype(np.int64).to_numpy(), "source_us": su, "target_us": tu,
                        "ratio": ratio, "evidence": evidence, "estimated_us": est})
    out["_big"] = np.maximum(su, tu)
    return out.sort_values(["module", "_big"], ascending=[True, False]).drop(columns="_big").reset_index(drop=True)
