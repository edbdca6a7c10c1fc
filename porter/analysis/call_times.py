"""Each op call's measured time on one side of a live pair: what the other side's fused
kernels are split by (porter.analysis.split_fused).

A call is keyed (module, canonical op, k) as everywhere in a live pair: by the ``call`` tag its
capture wrote (torchax's HLO op_name, inductor's FX provenance, ORT's exporter node) where the
side carries tags, else by the profiler tree (porter.analysis.call_identity: eager's
``aten::batch_norm`` with its kernels inside it). Only work that ran unfused counts: an op that
holds several modules' or calls' work (``members`` / ``call_members``) measures none of them
alone. A call's time is the sum of its ops' charged time in a step, its median over the
profiled steps (one preempted step does not make a ReLU the heaviest member of a kernel).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from porter.analysis.call_identity import call_keys
from porter.analysis.optime import OpTimes

CallKey = tuple[str, str, int]  # (module, canonical op, k)


def _fused(ops: pd.DataFrame) -> np.ndarray:
    out = np.zeros(len(ops), dtype=bool)
    for col in ("members", "call_members"):
        if col in ops.columns:
            out |= ops[col].astype(str).to_numpy() != ""
    return out


def _tagged(ops: pd.DataFrame) -> bool:
    return "call" in ops.columns and bool((ops["call"].astype(str) != "").any())


def call_time_frame(ops: pd.DataFrame, times: OpTimes) -> pd.DataFrame:
    """One row per unfused op inside a call: op_id, module, op, k, step, t (its charged time)."""
    keep = ~_fused(ops) & (ops["step"].to_numpy() >= 0)
    if _tagged(ops):
        f = ops.loc[keep & (ops["call"].astype(str).to_numpy() != ""), ["op_id", "module", "call", "step"]]
        op_k = f["call"].astype(str).str.rpartition("#")
        f = pd.DataFrame({"op_id": f["op_id"].to_numpy(), "module": f["module"].to_numpy(), "op": op_k[0].to_numpy(),
                          "k": pd.to_numeric(op_k[2], errors="coerce").to_numpy(), "step": f["step"].to_numpy()})
    elif _fused(ops).any():
        return pd.DataFrame(columns=["op_id", "module", "op", "k", "step", "t"])  # a compiled side without tags
    else:
        keys = call_keys(ops)
        step = pd.Series(ops["step"].to_numpy(), index=ops["op_id"].to_numpy())
        f = keys.assign(step=step.reindex(keys["op_id"].to_numpy()).to_numpy())[["op_id", "module", "op", "k", "step"]]
        f = f[f["op_id"].isin(ops.loc[keep, "op_id"])]
    f = f.dropna(subset=["k"])
    return f.assign(k=f["k"].astype(np.int64), t=times.values.reindex(f["op_id"].to_numpy()).fillna(0.0).to_numpy())


def measured_calls(ops: pd.DataFrame, times: OpTimes) -> dict[CallKey, float]:
    """(module, op, k) -> the call's time per step (us, median over the profiled steps), for
    calls with time; see the module doc."""
    f = call_time_frame(ops, times)
    if f.empty:
        return {}
    per_step = f.groupby(["module", "op", "k", "step"], sort=False)["t"].sum()
    med = per_step.groupby(level=[0, 1, 2], sort=False).median()
    med = med[med > 0]
    return {(str(m), str(o), int(k)): float(v) for (m, o, k), v in med.items()}


def calls_apart(ops: pd.DataFrame, times: OpTimes) -> set[tuple[str, str]]:
    """(module, '<op>#<k>') of the calls this side ran (in part) as unfused ops of their own: a
    convolution whose extern kernel ran alone, a dense layer's GEMM whose bias add was fused
    with the next call. In a fused op that lists such a call, the other side's time for the
    call is not this op's work."""
    if not _tagged(ops):
        return set()
    t = times.values.reindex(ops["op_id"].to_numpy()).fillna(0.0).to_numpy()
    own = ~_fused(ops) & (ops["call"].astype(str).to_numpy() != "") & (t > 0)
    return set(zip(ops["module"].to_numpy()[own].tolist(), ops["call"].astype(str).to_numpy()[own].tolist()))
