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

An epilogue (a member whose estimated share is under ``EPILOGUE_SHARE``: the batch norm and
ReLU fused onto a convolution's output, a block's residual add) is below what the estimate
can resolve: its share of a few tenths of a microsecond against the eager op's own call
made 50x "gaps". It is folded into the nearest larger member (most scopes in common, then
largest). Then members in a module and in its descendants are not split apart: they go
to that module whole (a block's own add holding a third of a fused kernel with its child's
dense layer). ``Split.absorbed`` records each module -> the module its share went to, so
that the rest of that module's work on both sides joins the same group, unless that side
still runs matmul or convolution work of the module's own that outweighs what went
(porter.analysis.align_identity: ``identity+fused``); what was merged is measured whole on
both sides. Only members in modules that do not nest (the convolutions of two blocks) are
split by estimate.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from porter.analysis.optime import DEVICE, op_times
from porter.core.opclass import classify_op


EPILOGUE_SHARE = 0.05  # below this share of a fusion's estimated cost a member is an epilogue
HEAVY = ("matmul", "conv")  # op classes whose own work keeps a module from being absorbed


@dataclass(frozen=True)
class Split:
    ops: pd.DataFrame  # the ops with one child row per member module of each split op
    estimated_us: float  # charged time placed on modules by estimate
    split_ops: int  # fused ops that were split
    absorbed: dict[str, str] = field(default_factory=dict)  # epilogue module -> module it was folded into


def _within(path: str, outer: str) -> bool:
    """path is outer or inside it; the root holds nothing here (root work fused with a block's
    does not make the block the root's)."""
    return path == outer or (outer != "" and path.startswith(outer + "/"))


def _shared(a: str, b: str) -> int:
    """How many leading scopes two module paths share."""
    n = 0
    for x, y in zip(a.split("/"), b.split("/")):
        if x != y:
            break
        n += 1
    return n


def merge_nested(members: list[list], absorbed: dict[str, str] | None = None) -> list[list]:
    """[[module, op, share], ...] with each member in a module nested in another member's
    module moved to the outermost such module; shares of one module added, its largest
    member's op kept (see the module doc). absorbed gets module -> where it went."""
    paths = {m[0] for m in members}
    top = {p: next(o for o in sorted(paths, key=len) if _within(p, o)) for p in paths}
    out: dict[str, list] = {}
    for module, op, share in sorted(members, key=lambda m: -m[2]):
        into = top[module]
        if into != module and absorbed is not None:
            absorbed.setdefault(module, into)
        if into in out:
            out[into][2] += share
        else:
            out[into] = [into, op, share]
    return list(out.values())


def fold_epilogues(members: list[list], absorbed: dict[str, str]) -> list[list]:
    """Members under EPILOGUE_SHARE added to the nearest larger member (the most scopes in
    common, then the largest: a block's batch norm goes to that block's convolution);
    absorbed gets module -> where it went."""
    big = [list(m) for m in members if m[2] >= EPILOGUE_SHARE] or [list(max(members, key=lambda m: m[2]))]
    for m in members:
        if any(m[0] == b[0] and m[1] == b[1] and m[2] == b[2] for b in big):
            continue
        into = max(big, key=lambda b: (_shared(m[0], b[0]), b[2]))
        into[2] += m[2]
        if m[0] != into[0]:
            absorbed.setdefault(m[0], into[0])
    return big


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
    candidates: dict[str, str] = {}
    moved_us: dict[str, float] = {}
    for r in rows.itertuples(index=False):
        t = float(charged.get(r.op_id, 0.0))
        original, went = json.loads(r.members), {}
        members = merge_nested(fold_epilogues(original, went), went)
        for module, _, share in original:
            if module in went:
                candidates.setdefault(module, went[module])
                moved_us[module] = moved_us.get(module, 0.0) + t * share
        if len(members) == 1 and members[0][0] != r.module:
            moved[r.op_id] = members[0][0]  # all its members nest in one module: that module's, whole
        if t <= 0 or len(members) < 2:
            continue
        split += 1
        estimated += t
        for module, op, share in members:
            child = r._asdict()
            cls = classify_op(op) if op else "other"
            if module != r.module and "call" in child:
                child["call"] = ""  # another module's work: not the call the fusion's root was tagged with
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
    # a module is absorbed when its own work on this side is only light ops or less than what went
    # into another module's share (a batch norm folded onto a convolution, its scale computed
    # apart), not when a sliver of it did (a dense layer's bias add: its GEMM stays its own)
    own = np.where(ops["members"].to_numpy() == "", charged.reindex(ops["op_id"].to_numpy()).fillna(0.0).to_numpy(), 0.0)
    modules = ops["module"].to_numpy()
    own_us = pd.Series(own).groupby(modules).sum()
    heavy = set(modules[(own > 0) & ops["op_class"].isin(HEAVY).to_numpy()].tolist())
    absorbed = {m: into for m, into in candidates.items()
                if m not in heavy or moved_us.get(m, 0.0) >= float(own_us.get(m, 0.0))}
    if not new and not moved:
        return Split(ops, 0.0, 0, absorbed)
    out = ops.copy()
    if moved:
        out["module"] = out["op_id"].map(moved).fillna(out["module"])
    if zero_device:  # the fusion keeps its row; its device time now lies in its members' rows
        out.loc[out["op_id"].isin(zero_device), "device_us"] = 0.0
    # host basis: a row's charge is its wall time minus its children's, so the new children take it
    out = pd.concat([out, pd.DataFrame(new, columns=ops.columns)], ignore_index=True)
    return Split(out, estimated, split, absorbed)
