"""Split a fused op's time among the modules its members came from: by the time the other
side measured for the same op calls, by estimated cost where nothing pairs.

An XLA fusion, an inductor kernel or an ORT fused node can hold the work of several modules
(an inductor kernel on resnet computes one block's BatchNorm and ReLU and lays out the next
block's convolution input; one XLA:CPU fusion held convolutions of layer2 and layer3).
Charged to the one module its tag names (often the block enclosing them all), that module
looks tens of times slower and the others look free. Here each such op keeps its row (the
fusion stays visible, with zero time of its own) and gets one child row per member module
carrying ``share * its time``, named ``<fusion> [share of <module>, measured]`` or
``[..., estimated]``; a kernel labelled with an outer module is so pushed down to its
members. Each module's time is then the sum of its shares.

Live pairs, first choice: the fused op's member op calls (``ops.call_members``) priced by the
other side's unfused time for each same call (porter.analysis.fused_shares: eager's BatchNorm
and erfinv calls, paired by module and '<op>#<k>'); members that pair with nothing keep their
estimated share, and ``call_split`` on the fused row says each call's share and how it was
priced. ``measured_us`` / ``estimated_us`` say how much time was placed each way.

Otherwise (no call members, nothing paired) by estimate over the modules (``ops.members``:
FLOPs, or elements times a cost per element, from HLO shapes or FX meta). An epilogue (a
member whose estimated share is under ``EPILOGUE_SHARE``: the batch norm and ReLU fused onto
a convolution's output, a block's residual add) is below what an estimate can resolve: its
share of a few tenths of a microsecond against the eager op's own call made 50x "gaps". It is
folded into the nearest larger member (most scopes in common, then largest). Then members in
a module and in its descendants are not split apart: they go to that module whole (a block's
own add holding a third of a fused kernel with its child's dense layer). ``Split.absorbed``
records each module -> the module its share went to, so that the rest of that module's work
on both sides joins the same group, unless that side still runs matmul or convolution work of
the module's own that outweighs what went (porter.analysis.align_identity:
``identity+fused``); what was merged is measured whole on both sides. Only members in modules
that do not nest (the convolutions of two blocks) are split by estimate.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from porter.analysis.fused_shares import CallKey, CallShare, call_shares, encode
from porter.analysis.optime import DEVICE, op_times
from porter.core.opclass import classify_op


EPILOGUE_SHARE = 0.05  # below this share of a fusion's estimated cost a member is an epilogue
HEAVY = ("matmul", "conv")  # op classes whose own work keeps a module from being absorbed
MEASURED, ESTIMATED = "measured", "estimated"  # how a child row's share was priced (its name says)


@dataclass(frozen=True)
class Split:
    ops: pd.DataFrame  # the ops with one child row per member module of each split op
    estimated_us: float  # charged time placed on modules by estimate
    split_ops: int  # fused ops that were split
    absorbed: dict[str, str] = field(default_factory=dict)  # epilogue module -> module it was folded into
    measured_us: float = 0.0  # charged time placed on modules by the other side's measured call times


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


def _module_parts(calls: list[CallShare]) -> list[tuple[str, str, float, bool]]:
    """(module, its largest call's op, share, measured) per module and basis, largest first."""
    parts: dict[tuple[str, bool], list] = {}
    for c in sorted(calls, key=lambda c: -c.share):
        part = parts.setdefault((c.module, c.measured), [c.module, c.op, 0.0, c.measured])
        part[2] += c.share
    return [tuple(p) for p in parts.values()]  # type: ignore[misc]


def _estimated_parts(members_json: str, t: float, candidates: dict[str, str],
                     moved_us: dict[str, float]) -> list[tuple[str, str, float, bool]]:
    """The members by estimate, epilogues folded and nested modules merged (the module doc);
    candidates and moved_us get what each folded module gave and where."""
    original, went = json.loads(members_json), {}
    members = merge_nested(fold_epilogues(original, went), went)
    for module, _, share in original:
        if module in went:
            candidates.setdefault(module, went[module])
            moved_us[module] = moved_us.get(module, 0.0) + t * share
    return [(module, op, share, False) for module, op, share in members]


def split_fused(ops: pd.DataFrame, measured: dict[CallKey, float] | None = None,
                apart: set[tuple[str, str]] | None = None) -> Split:
    """See the module doc. measured: the other side's time per op call (porter.analysis.call_times
    .measured_calls), apart: this side's calls that also ran unfused (calls_apart); without them
    every split is by estimate. Ops without members (or a table without the column) pass through."""
    if "members" not in ops.columns or not (ops["members"] != "").any():
        return Split(ops, 0.0, 0)
    times = op_times(ops)
    charged = times.values
    rows = ops.loc[ops["members"] != ""]
    has_calls = "call_members" in ops.columns
    new: list[dict] = []
    zero_device: list[int] = []
    next_id = int(ops["op_id"].max()) + 1
    estimated = by_measure = 0.0
    split = 0
    moved: dict[int, str] = {}
    call_split: dict[int, str] = {}
    candidates: dict[str, str] = {}
    moved_us: dict[str, float] = {}
    for r in rows.itertuples(index=False):
        t = float(charged.get(r.op_id, 0.0))
        calls = call_shares(r.call_members, measured, apart or set()) if measured and has_calls else []
        if calls:
            parts = _module_parts(calls)
            call_split[r.op_id] = encode(calls)
        else:
            parts = _estimated_parts(r.members, t, candidates, moved_us)
        modules = {p[0] for p in parts if p[2] > 0}
        if len(modules) == 1 and next(iter(modules)) != r.module:
            moved[r.op_id] = next(iter(modules))  # all its work lies in one module: that module's, whole
        if t <= 0 or len(modules) < 2:
            continue
        split += 1
        for module, op, share, by_time in parts:
            if share <= 0:
                continue
            if by_time:
                by_measure += t * share
            else:
                estimated += t * share
            new.append(_child(r, next_id, module, op, share * t, by_time, times.basis == DEVICE))
            next_id += 1
        if times.basis == DEVICE:
            zero_device.append(r.op_id)
    absorbed = _absorbed(ops, charged, candidates, moved_us)
    if not new and not moved:
        return Split(ops, 0.0, 0, absorbed)
    out = ops.copy()
    if moved:
        out["module"] = out["op_id"].map(moved).fillna(out["module"])
    if zero_device:  # the fusion keeps its row; its device time now lies in its members' rows
        out.loc[out["op_id"].isin(zero_device), "device_us"] = 0.0
    if call_split:
        out["call_split"] = out["op_id"].map(call_split).fillna("")
    # host basis: a row's charge is its wall time minus its children's, so the new children take it
    out = pd.concat([out, pd.DataFrame(new, columns=out.columns)], ignore_index=True)
    if call_split:
        out["call_split"] = out["call_split"].fillna("")
    return Split(out, estimated, split, absorbed, by_measure)


def _child(r: Any, op_id: int, module: str, op: str, us: float, by_time: bool, device: bool) -> dict:
    """One module's share of fused op r: a child row of it carrying us."""
    child = r._asdict()
    cls = classify_op(op) if op else "other"
    if module != r.module and "call" in child:
        child["call"] = ""  # another module's work: not the call the fusion's root was tagged with
    child.update(op_id=op_id, parent_id=r.op_id, module=module, framework_op=op,
                 op_class=cls if cls != "other" else r.op_class,
                 name=f"{r.name} [share of {module or '(root)'}, {MEASURED if by_time else ESTIMATED}]", members="",
                 device_us=us if device else 0.0, host_us=0.0 if device else us,
                 kernel_count=0, flops=np.nan, bytes=np.nan)
    if "call_members" in child:
        child["call_members"] = ""
    return child


def _absorbed(ops: pd.DataFrame, charged: pd.Series, candidates: dict[str, str],
              moved_us: dict[str, float]) -> dict[str, str]:
    """A module is absorbed when its own work on this side is only light ops or less than what went
    into another module's share (a batch norm folded onto a convolution, its scale computed
    apart), not when a sliver of it did (a dense layer's bias add: its GEMM stays its own)."""
    if not candidates:
        return {}
    own = np.where(ops["members"].to_numpy() == "", charged.reindex(ops["op_id"].to_numpy()).fillna(0.0).to_numpy(), 0.0)
    modules = ops["module"].to_numpy()
    own_us = pd.Series(own).groupby(modules).sum()
    heavy = set(modules[(own > 0) & ops["op_class"].isin(HEAVY).to_numpy()].tolist())
    return {m: into for m, into in candidates.items()
            if m not in heavy or moved_us.get(m, 0.0) >= float(own_us.get(m, 0.0))}
