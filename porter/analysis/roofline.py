"""Per matched group: the target's roofline time and the time a fix could recover.

Wires porter.analysis.perfmodel into a diagnosis: ceilings for each side from its manifest
(measured at capture, else the datasheet table), FLOPs and bytes per group from
porter.analysis.groupcost, then roofline, source time scaled to the target's hardware, and
recoverable / demonstrated time (docs/perfmodel.md has the formulas and why).

Costs come from the target's own ops when its trace recorded shapes; a target without
shapes (an XLA trace names HLO ops, not tensors) takes the source ops' costs: the same
math, though the source's unfused bytes overstate what a fused target must move, so the
roofline is then conservative (higher) and the recoverable time lower.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
import pandas as pd

from porter.analysis.perfmodel import Ceilings, ceilings_for, expected_from_source_us, recoverable_us, roofline_us

FORMULA = ("roofline_us = max(flops / peak FLOP/s[dtype], bytes / bandwidth); "
           "recoverable_us = max(0, target_us - min(roofline_us, source_us scaled to the target)); "
           "demonstrated_us = max(0, target_us - source_us scaled); efficiency = roofline_us / target_us (<= 1: "
           "a target measured faster than its ceiling allows shows the ceiling is wrong for that op, so its observed "
           "time is the bound, roofline_basis 'observed'); "
           "groups with no FLOPs and no bytes known have null roofline, efficiency and recoverable")
OBSERVED, CEILING, UNKNOWN = "observed", "ceiling", "unknown"  # roofline_basis per group


@dataclass(frozen=True)
class SideCeilings:
    ceilings: Ceilings | None
    reason: str

    def to_dict(self) -> dict[str, Any]:
        c = self.ceilings
        if c is None:
            return {"known": False, "reason": self.reason}
        return {"known": True, "device": c.device, "measured": c.measured, "reason": self.reason,
                "flops_per_s": dict(c.flops_per_s), "bytes_per_s": c.bytes_per_s}


def side_ceilings(manifest: Mapping[str, Any]) -> SideCeilings:
    return SideCeilings(*ceilings_for(manifest))


def has_cost(flops: Any, bytes_: Any) -> np.ndarray:
    """Cost is known where FLOPs or bytes are positive. A zero for both is not a cost model
    of an op that took time (a wrapper whose work sits elsewhere, a view that did copy):
    it would claim a 0 us roofline and call all its time recoverable."""
    f = np.nan_to_num(np.asarray(flops, dtype=np.float64), nan=0.0)
    b = np.nan_to_num(np.asarray(bytes_, dtype=np.float64), nan=0.0)
    return (f > 0) | (b > 0)


def known_cost_share(table: pd.DataFrame, groups: pd.DataFrame) -> dict[str, float | None]:
    """Per side, the share of its matched time in groups whose FLOPs/bytes are known
    (the target counts costs taken from the source's same math)."""
    known = {"source": table["source_cost_known"].to_numpy(bool), "target": (table["cost_basis"] != "unknown").to_numpy()}
    out: dict[str, float | None] = {}
    for side in ("source", "target"):
        us = groups[f"{side}_us"].to_numpy(np.float64)
        out[side] = float(us[known[side]].sum() / us.sum()) if us.sum() > 0 else None
    return out


def observed_bound(roofline: np.ndarray, target_us: np.ndarray, known: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The roofline no measured time beats, and its basis per group.

    A target that ran faster than its datasheet or measured ceiling allows proves the ceiling
    wrong for that op (a cache-resident operand, a fused kernel that moved fewer bytes than the
    unfused ops' count, a measured ceiling taken on a slower kernel): the observed time is then
    the best bound known, so an efficiency never exceeds 100%."""
    with np.errstate(invalid="ignore"):
        beaten = known & (target_us > 0) & (roofline > target_us)
    basis = np.where(~known, UNKNOWN, np.where(beaten, OBSERVED, CEILING)).astype(object)
    return np.where(beaten, target_us, roofline), basis


def group_roofline(groups: pd.DataFrame, source: pd.DataFrame, target: pd.DataFrame,
                   src: SideCeilings, tgt: SideCeilings) -> pd.DataFrame:
    """One row per group (groups' order): costs used, roofline, efficiency, expected, recoverable, demonstrated.

    groups: group_id, source_us, target_us; source/target: porter.analysis.groupcost.group_facts
    indexed by group_id.
    """
    gid = groups["group_id"]
    s, t = source.reindex(gid), target.reindex(gid)
    use_t = has_cost(t["flops"], t["bytes"])
    flops = np.where(use_t, t["flops"], s["flops"]).astype(np.float64)
    bytes_ = np.where(use_t, t["bytes"], s["bytes"]).astype(np.float64)
    dtype = np.where(t["dtype"].to_numpy(object) != "", t["dtype"].to_numpy(object), s["dtype"].to_numpy(object))
    dtype = dtype.astype(object)  # '' unknown: porter.analysis.fixes must not read it as fp32
    peak_dtype = np.where(dtype == "", "fp32", dtype).astype(object)  # the FLOP term needs a peak; costs are NaN there anyway
    known = has_cost(flops, bytes_)
    basis = np.where(~known, "unknown", np.where(use_t, "target ops", "source ops (same math)"))
    tgt_us = groups["target_us"].to_numpy(np.float64)
    src_us = groups["source_us"].to_numpy(np.float64)
    rl = roofline_us(flops, bytes_, tgt.ceilings, peak_dtype)
    rl, rl_basis = observed_bound(rl, tgt_us, known)
    kw = dict(flops=flops, bytes_=bytes_, dtype=peak_dtype)
    scaled, scale_basis = expected_from_source_us(src_us, src.ceilings, tgt.ceilings, **kw)
    rec = recoverable_us(tgt_us, src_us, rl, src.ceilings, tgt.ceilings, **kw)
    rl = np.where(known, rl, np.nan)  # unknown is unknown: no roofline, nothing claimed recoverable
    rec = np.where(known, rec, np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        eff = np.where(tgt_us > 0, rl / tgt_us, np.nan)
    return pd.DataFrame({
        "group_id": gid.to_numpy(),
        "flops": flops, "bytes": bytes_, "dtype": dtype, "cost_basis": basis,
        "roofline_us": rl, "roofline_basis": rl_basis, "efficiency": eff,
        "expected_us": scaled, "expected_basis": scale_basis,
        "recoverable_us": rec, "demonstrated_us": np.maximum(tgt_us - scaled, 0.0),
        "source_cost_known": has_cost(s["flops"], s["bytes"]),
    })


def roofline_block(table: pd.DataFrame, groups: pd.DataFrame, src: SideCeilings, tgt: SideCeilings) -> dict[str, Any]:
    """The diagnosis.json `roofline` block (docs/diagnosis.md)."""
    known = table["roofline_us"].notna()
    return {
        "ceilings": {"source": src.to_dict(), "target": tgt.to_dict()},
        "formula": FORMULA,
        "totals": {
            "target_us": float(groups["target_us"].sum()),
            "roofline_us": float(table.loc[known, "roofline_us"].sum()),
            # groups measured faster than their ceiling: the observed time is their bound
            "observed_bound_groups": int((table["roofline_basis"] == OBSERVED).sum()),
            "target_us_with_roofline": float(groups.loc[known.to_numpy(), "target_us"].sum()),
            "recoverable_us": float(table["recoverable_us"].sum()),  # NaN (unknown cost) groups left out
            "unknown_cost_target_us": float(groups.loc[(table["cost_basis"] == "unknown").to_numpy(), "target_us"].sum()),
            "known_cost_share": known_cost_share(table, groups),
            "demonstrated_us": float(table["demonstrated_us"].sum()),
            "groups_with_costs": int((table["cost_basis"] != "unknown").sum()),
            "groups": int(len(table)),
        },
        "groups": table.to_dict(orient="records"),
    }
