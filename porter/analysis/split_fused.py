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
    for r in rows.itertuples(index=False):
        t = float(charged.get(r.op_id, 0.0))
        members = json.loads(r.members)
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
    if not new:
        return Split(ops, 0.0, 0)
    out = ops.copy()
    if zero_device:  # the fusion keeps its row; its device time now lies in its members' rows
        out.loc[out["op_id"].isin(zero_device), "device_us"] = 0.0
    # host basis: a row's charge is its wall time minus its children's, so the new children take it
    out = pd.concat([out, pd.DataFrame(new, columns=ops.columns)], ignore_index=True)
    return Split(out, estimated, split)
