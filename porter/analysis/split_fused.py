"""Split a fused op's time among the modules its members came from, by estimated cost.

An XLA fusion or an inductor kernel can hold the work of several modules (one XLA:CPU
fusion held convolutions of layer2 and layer3 of a resnet). Charged to the one module its
tag names, that module looks hundreds of times slower and the others look free. Readers
and capture stacks record, per fused op, its members by module and each one's share of
the estimated cost (``ops.members``: FLOPs/elements from HLO shapes or FX meta). Here each
such op keeps its row (the fusion stays visible, with zero time of its own) and gets one
child row per member module carrying ``share * its time``, named
``<fusion> [share of <module>, estimated]``. Each module's time is then the sum of its
shares; ``estimated_us`` says how much time was placed by estimate.

Members in a module and in its descendants are not split apart: they go to that module
whole (``merge_nested``). A block's own residual add fused into its child LayerNorm's
kernel would otherwise get an element-count share of a few microseconds against the
eager add's own call (allocation and dispatch included), a 30x "gap" made by the estimate;
given whole to the block, the block's add and its LayerNorm child (handed up, one-sided)
meet the kernel in one group, measured on both sides. Only members in modules that do not
nest (siblings, cousins: the convolutions of two blocks) are split by estimate.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd

from porter.analysis.optime import DEVICE, op_times
from porter.opclass import classify_op


@dataclass(frozen=True)
class Split:
    ops: pd.DataFrame  # the ops with one child row per member module of each split op
    estimated_us: float  # charged time placed on modules by estimate
    split_ops: int  # fused ops that were split


def _within(path: str, outer: str) -> bool:
    return outer == "" or path == outer or path.startswith(outer + "/")


def merge_nested(members: list[list]) -> list[list]:
    """[[module, op, share], ...] with each member in a module nested in another member's
    module moved to the outermost such module; shares of one module added, its largest
    member's op kept (see the module doc)."""
    paths = {m[0] for m in members}
    top = {p: next(o for o in sorted(paths, key=len) if _within(p, o)) for p in paths}
    out: dict[str, list] = {}
    for module, op, share in sorted(members, key=lambda m: -m[2]):
        into = top[module]
        if into in out:
            out[into][2] += share
        else:
            out[into] = [into, op, share]
    return list(out.values())


def split_fused(ops: pd.DataFrame) -> Split:
    """See the module doc. Ops without members (or a table without the column) pass through."""
    if "members" not in ops.columns or not (ops["members"] != "").any():
        return Split(ops, 0.0, 0)
    times = op_times(ops)
    charged = times.values
    rows = ops.loc[ops["members"] != ""]
    new: list[dict] = []
    zero_device: list[int] = []
    next_id = int(ops["op_id"].max()) + 1
    estimated = 0.0
    split = 0
    moved: dict[int, str] = {}
    for r in rows.itertuples(index=False):
        t = float(charged.get(r.op_id, 0.0))
        members = merge_nested(json.loads(r.members))
        if len(members) == 1 and members[0][0] != r.module:
            moved[r.op_id] = members[0][0]  # all its members nest in one module: that module's, whole
        if t <= 0 or len(members) < 2:
            continue
        split += 1
        estimated += t
        for module, op, share in members:
            child = r._asdict()
            cls = classify_op(op) if op else "other"
            child.update(op_id=next_id, parent_id=r.op_id, module=module, framework_op=op,
                         op_class=cls if cls != "other" else r.op_class,
                         name=f"{r.name} [share of {module or '(root)'}, estimated]", members="",
                         device_us=t * share if times.basis == DEVICE else 0.0,
                         host_us=t * share if times.basis != DEVICE else 0.0,
                         kernel_count=0, flops=np.nan, bytes=np.nan)
            new.append(child)
            next_id += 1
        if times.basis == DEVICE:
            zero_device.append(r.op_id)
    if not new and not moved:
        return Split(ops, 0.0, 0)
    out = ops.copy()
    if moved:
        out["module"] = out["op_id"].map(moved).fillna(out["module"])
    if zero_device:  # the fusion keeps its row; its device time now lies in its members' rows
        out.loc[out["op_id"].isin(zero_device), "device_us"] = 0.0
    # host basis: a row's charge is its wall time minus its children's, so the new children take it
    out = pd.concat([out, pd.DataFrame(new, columns=ops.columns)], ignore_index=True)
    return Split(out, estimated, split)
