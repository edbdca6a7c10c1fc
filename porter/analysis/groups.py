"""The units an alignment pairs and the groups it builds, below porter.analysis.align and
the passes it runs (porter.analysis.align_identity's among them), so a pass needs nothing
from align itself.

Each side is a frame of alignment units (unit_frame); a group holds units of both sides.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import pandas as pd

from porter.analysis.optime import OpTimes

UNMATCHED = -1


def subtree_times(ops: pd.DataFrame, t: np.ndarray) -> np.ndarray:
    """Each op's charged time plus its descendants' (t in the ops' row order), level by level."""
    pos = pd.Series(np.arange(len(ops)), index=ops["op_id"].to_numpy())
    parent = pos.reindex(ops["parent_id"].to_numpy()).fillna(-1).to_numpy(dtype=np.int64)
    depth = np.zeros(len(ops), dtype=np.int64)
    cur = parent.copy()
    while (cur >= 0).any():
        depth += cur >= 0
        cur = np.where(cur >= 0, parent[np.maximum(cur, 0)], -1)
    total = np.nan_to_num(np.asarray(t, dtype=np.float64)).copy()
    for d in range(int(depth.max(initial=0)), 0, -1):
        rows = np.flatnonzero(depth == d)
        np.add.at(total, parent[rows], total[rows])
    return total


def unit_frame(ops: pd.DataFrame, times: OpTimes, donor: pd.Series, region: pd.Series | None = None) -> pd.DataFrame:
    """The ops that carry time, in time order, one row per alignment unit.

    A unit is one op, except that consecutive synthetic ops repeating the kernels of the
    same donor op (an aten::mm's memset + GEMM) form one unit, as their donor would.
    ``wrapper`` marks ops whose work is their children's, their own time being dispatch:
    descendants charged more than the op, or a direct child of the op's own class
    (aten::linear around aten::addmm, aten::conv2d around aten::convolution).
    """
    t = times.values.reindex(ops["op_id"].to_numpy()).to_numpy()
    keep = t > 0
    f = ops.loc[keep, ["op_id", "step", "module", "op_class", "framework_op", "name", "start_us", "synthetic"]].copy()
    f["time"] = t[keep]
    f["donor"] = donor.to_numpy()[keep]
    f["region"] = (region.to_numpy()[keep] if region is not None else -1)
    f["fw"] = f["framework_op"].where(f["framework_op"] != "", f["name"])
    below = subtree_times(ops, t) - t  # charged time of each op's descendants
    kids = ops.loc[ops["parent_id"] >= 0, ["parent_id", "op_class"]]
    same = kids.merge(ops[["op_id", "op_class"]], left_on=["parent_id", "op_class"], right_on=["op_id", "op_class"])
    f["wrapper"] = (f["time"].to_numpy() < below[keep]) | f["op_id"].isin(same["op_id"]).to_numpy()
    f = f.sort_values(["step", "start_us", "op_id"], kind="stable").reset_index(drop=True)
    d = f["donor"].to_numpy()
    new_unit = np.ones(len(f), dtype=bool)
    new_unit[1:] = (d[1:] < 0) | (d[1:] != d[:-1])
    f["unit"] = np.cumsum(new_unit)
    f["inferred"] = d >= 0
    by = f.groupby("unit", sort=True)
    # units are consecutive rows (unit is a cumsum), so each unit's op ids are one slice
    starts = np.flatnonzero(new_unit)
    op_ids = [part.tolist() for part in np.split(f["op_id"].to_numpy(), starts[1:])]
    agg = pd.DataFrame({"op_ids": op_ids}, index=by.size().index)
    for col in ("step", "module", "op_class", "fw", "start_us", "synthetic"):
        agg[col] = by[col].first()
    agg["time"] = by["time"].sum()
    agg["inferred"] = by["inferred"].first()
    agg["wrapper"] = by["wrapper"].first()
    agg["region"] = by["region"].first()
    return agg.reset_index(drop=True)


class Groups:
    """Accumulates groups and marks ops as taken."""

    def __init__(self, src: pd.DataFrame, tgt: pd.DataFrame, region_names: dict[int, str] | None = None):
        self.src, self.tgt = src, tgt
        self.region_names = region_names or {}  # op_id of a compiled region -> its name
        self.src_gid = np.full(len(src), UNMATCHED, dtype=np.int64)
        self.tgt_gid = np.full(len(tgt), UNMATCHED, dtype=np.int64)
        self.rows: list[dict] = []
        # Plain arrays: per-group pandas indexing is far too slow for thousands of groups.
        self.cols = {side: {c: f[c].to_numpy() for c in ("op_ids", "time", "module", "op_class", "fw", "inferred", "step")}
                     for side, f in (("source", src), ("target", tgt))}
        # and lists for add(): a group holds a few rows, where numpy's per-call cost dominates
        self._lists = {side: {c: cols[c].tolist() for c in ("op_ids", "time", "inferred")}
                       for side, cols in self.cols.items()}

    def add(self, src_rows: Sequence[int], tgt_rows: Sequence[int], evidence: str, compiled: str = "") -> None:
        gid = len(self.rows)
        src_rows, tgt_rows = np.asarray(src_rows, dtype=np.int64), np.asarray(tgt_rows, dtype=np.int64)
        self.src_gid[src_rows] = gid
        self.tgt_gid[tgt_rows] = gid
        s, t = self.cols["source"], self.cols["target"]
        sl, tl = self._lists["source"], self._lists["target"]
        src_list, tgt_list = src_rows.tolist(), tgt_rows.tolist()
        main = max(src_list, key=sl["time"].__getitem__)  # the first of equal maxima, as argmax
        tmain = max(tgt_list, key=tl["time"].__getitem__)
        row = {
            "group_id": gid,
            "evidence": evidence,
            "inferred_scope": any(sl["inferred"][r] for r in src_list) or any(tl["inferred"][r] for r in tgt_list),
            "module": s["module"][main],
            "op_class": s["op_class"][main],
            "framework_op": s["fw"][main],
            "target_module": t["module"][tmain],
            "target_framework_op": t["fw"][tmain],
            "compiled": compiled,
            "source_ids": [i for r in src_list for i in sl["op_ids"][r]],  # ints already (unit_frame: tolist)
            "target_ids": [i for r in tgt_list for i in tl["op_ids"][r]],
        }
        if compiled:  # named by the region, not by whichever op in it took longest
            side = self.src if compiled == "source" else self.tgt
            rows = src_rows if compiled == "source" else tgt_rows
            reg = side["region"].to_numpy()[rows]
            name = self.region_names.get(int(reg[reg >= 0][0]), "compiled region")
            row["op_class"] = "compiled"
            row["framework_op" if compiled == "source" else "target_framework_op"] = name
        self.rows.append(row)

    def free(self, side: str) -> np.ndarray:
        gid = self.src_gid if side == "source" else self.tgt_gid
        return np.flatnonzero(gid == UNMATCHED)


def membership(frame: pd.DataFrame, gid: np.ndarray) -> pd.Series:
    """op_id -> group_id for every op in the frame's units."""
    sizes = frame["op_ids"].map(len).to_numpy()
    ids = np.fromiter((i for ids in frame["op_ids"] for i in ids), dtype=np.int64, count=int(sizes.sum()))
    return pd.Series(np.repeat(gid, sizes), index=ids, name="group_id")


Strategy = Callable[[Groups], None]  # one alignment pass: groups what earlier passes left free
