"""From a diagnosis's matched groups to porter.analysis.fixes's `groups` table, and the ranked plan
(every source's fixes ranked together, once: porter.analysis.fixrank.ranked).

porter.analysis.fixes documents the columns it needs; this module fills them from what diagnose
already has: the group table (times, modules, ops), each side's group facts
(porter.analysis.groupcost: kernels, costs, dtype, shapes), the roofline table (porter.analysis.roofline)
and, in live mode, per-module accuracy (porter.analysis.accuracy.compare_modules rows, joined by
module path). Host time not covered by device work is not measured yet (0). The runtime's time
outside every module (porter.analysis.outside: guard checks, the compiled graph's wrapper,
transfers) joins the table as one row per kind, for the catalogue's fixes of that kind.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from porter.analysis.fixes import FUSED_ATTENTION, Catalogue, load_catalogue
from porter.analysis.fixrank import RankedFix, fix_of_record, fixes_frame, ranked
from porter.analysis.outside import KIND_OPS


def fused_attention_modules(*ops_tables: pd.DataFrame) -> set[str]:
    """Module paths in which some op (either side) is a fused attention kernel."""
    found: set[str] = set()
    for ops in ops_tables:
        names = ops["framework_op"].where(ops["framework_op"] != "", ops["name"]).astype(str)
        hit = names.str.contains(FUSED_ATTENTION)
        found.update(ops.loc[hit.to_numpy(), "module"].astype(str))
    return found


def _in_or_below(module: str, modules: set[str]) -> bool:
    """module is one of modules, or lies inside one of them (a q_proj inside a fused attention)."""
    parts = module.split("/") if module else []
    return any("/".join(parts[:i]) in modules for i in range(1, len(parts) + 1))


def fix_groups(groups: pd.DataFrame, source_facts: pd.DataFrame, target_facts: pd.DataFrame,
               roofline: pd.DataFrame, *, source_device_type: str, target_device_type: str, target_stack: str = "other",
               source_stack: str = "other",
               fused_modules: set[str] = frozenset(), accuracy: pd.DataFrame | None = None,
               outside: tuple[Mapping[str, float], Mapping[str, float]] = ({}, {}),
               runtime_share: float | None = None) -> pd.DataFrame:
    """The `groups` input of porter.analysis.fixes.rank_fixes (docs/fixes.md), one row per matched
    group, then one per kind of the target runtime's time outside every module (outside: each
    side's time per kind, alignment stats `{side}_outside_modules_by_kind_us`; runtime_share:
    porter.analysis.outside.source_runtime_share on a live pair)."""
    gid = groups["group_id"]
    s, t = source_facts.reindex(gid), target_facts.reindex(gid)
    rl = roofline.set_index("group_id").reindex(gid)
    tfo = groups["target_framework_op"].fillna("").astype(str)
    shapes_t = t["input_shapes"].fillna("").to_numpy(object)
    use_t = shapes_t != ""
    fo = np.where(tfo != "", tfo, groups["framework_op"].astype(str))
    if "compiled" in groups.columns:  # a compiled group is named by its region, whichever side runs it
        fo = np.where(groups["compiled"].fillna("").astype(str) == "source", groups["framework_op"].astype(str), fo)
    out = pd.DataFrame({
        "group_id": gid.astype(str).to_numpy(),
        "module": groups["module"].fillna("").astype(str).to_numpy(),
        "op_class": groups["op_class"].astype(str).to_numpy(),
        "framework_op": fo,
        "source_framework_op": groups["framework_op"].astype(str).to_numpy(),
        "source_us": groups["source_us"].to_numpy(np.float64),
        "target_us": groups["target_us"].to_numpy(np.float64),
        "source_kernels": s["kernels"].fillna(0).astype(np.int64).to_numpy(),
        "target_kernels": t["kernels"].fillna(0).astype(np.int64).to_numpy(),
        "flops": rl["flops"].to_numpy(np.float64),
        "bytes": rl["bytes"].to_numpy(np.float64),
        "dtype": rl["dtype"].fillna("").astype(str).to_numpy(),
        "source_dtype": s["dtype"].fillna("").astype(str).to_numpy(),
        "input_shapes": np.where(use_t, shapes_t, s["input_shapes"].fillna("").to_numpy(object)),
        "dtypes": np.where(use_t, t["dtypes"].fillna("").to_numpy(object), s["dtypes"].fillna("").to_numpy(object)),
        "target_device_type": target_device_type,
        "target_stack": target_stack,
        "source_stack": source_stack,
        "source_device_type": source_device_type,
        "host_us": 0.0,
        "recompiles": -1,
        "compiled": groups["compiled"].fillna("").astype(str).to_numpy() if "compiled" in groups.columns else "",
        "roofline_us": rl["roofline_us"].to_numpy(np.float64),
        "recoverable_us": rl["recoverable_us"].to_numpy(np.float64),
        "demonstrated_us": rl["demonstrated_us"].to_numpy(np.float64),
    })
    if {"source_step_us", "target_step_us"} <= set(groups.columns):
        # the ratio the fixes' conditions read, per unprofiled step as by_module shows it: the raw
        # profiled ratio carries the sides' profiler slowdowns (eager 1.4x, inductor 1.1x), and beside
        # a busy loop it read a planted erfinv module 1.99x, under eager-module-in-compiled's 2x
        ss, ts = (groups[c].to_numpy(np.float64) for c in ("source_step_us", "target_step_us"))
        with np.errstate(divide="ignore", invalid="ignore"):
            out["step_ratio"] = np.where(ss > 0, ts / ss, np.nan)
    out["already_fused"] = [_in_or_below(m, set(fused_modules)) for m in out["module"]]
    if "significant" in groups.columns:  # a live pair's gap intervals (porter.analysis.gap_noise)
        measured = groups["gap_steps"].fillna(0).to_numpy(np.float64) >= 2
        out["within_noise"] = measured & ~groups["significant"].fillna(False).to_numpy(bool)
    if accuracy is not None and len(accuracy):
        acc = accuracy.drop_duplicates("module").set_index("module")
        out["local_error"] = acc["local_rel_l2"].reindex(out["module"]).to_numpy(np.float64)
        out["tolerance"] = acc["tolerance"].reindex(out["module"]).to_numpy(np.float64)
        out["introduces_error"] = acc["introduces_error"].reindex(out["module"]).fillna(False).astype(bool).to_numpy()
        if "rewrite_op" in acc.columns:  # a rewrite's op named (porter.accuracy.rewrite)
            out["rewrite_differs"] = acc["rewrite_op"].reindex(out["module"]).notna().to_numpy()
    rows = outside_fix_groups(*outside, target_device_type=target_device_type, target_stack=target_stack,
                              source_device_type=source_device_type, runtime_share=runtime_share)
    if rows.empty:
        return out
    both = pd.concat([out.assign(outside=""), rows], ignore_index=True)
    if "within_noise" in both.columns:
        both["within_noise"] = both["within_noise"].fillna(False).astype(bool)
    if "introduces_error" in both.columns:
        both["introduces_error"] = both["introduces_error"].fillna(False).astype(bool)
    return both


def outside_fix_groups(source: Mapping[str, float], target: Mapping[str, float], *, target_device_type: str,
                       target_stack: str, source_device_type: str, runtime_share: float | None = None) -> pd.DataFrame:
    """One fix-table row per kind of the target runtime's time outside every module: no module
    ran it and it has no cost model, so the time the source does not spend there (demonstrated_us)
    is what a fix of its kind can recover. With runtime_share (a live pair's), the source's side
    of each row is that share of the target's time: the source's whole runtime, its Python and
    dispatch between ops included, against the target's, so an eager source that spends more
    there than the compiled target's wrapper leaves the wrapper no gap to close."""
    rows = []
    for kind, us in target.items():
        src = float(source.get(kind, 0.0) or 0.0) if runtime_share is None else runtime_share * float(us or 0.0)
        if not us or us <= 0:
            continue
        rows.append({
            "group_id": f"outside:{kind}", "module": "", "op_class": "other", "framework_op": KIND_OPS.get(kind, kind),
            "source_framework_op": "", "source_us": src, "target_us": float(us), "source_kernels": 0,
            "target_kernels": 0, "flops": np.nan, "bytes": np.nan, "dtype": "", "source_dtype": "",
            "input_shapes": "", "dtypes": "", "target_device_type": target_device_type, "target_stack": target_stack,
            "source_device_type": source_device_type, "host_us": 0.0, "recompiles": -1, "compiled": "",
            "roofline_us": np.nan, "recoverable_us": np.nan, "demonstrated_us": max(float(us) - src, 0.0),
            "already_fused": False, "within_noise": False, "outside": kind,
        })
    return pd.DataFrame(rows)


def catalogue_from(path: str | Path | None) -> Catalogue:
    """The built-in catalogue, with the user's file (--catalogue) merged over it."""
    return load_catalogue(path) if path is not None else load_catalogue()


def fix_plan(found: Iterable[RankedFix], records: Iterable[Mapping[str, Any]] = ()) -> list[dict[str, Any]]:
    """The diagnosis.json `fixes` list: the groups' fixes and those already in records form
    (porter ops' flagged ops), ranked together once."""
    frame = fixes_frame(ranked([*found, *map(fix_of_record, records)]))
    return frame.to_dict(orient="records") if len(frame) else []
