"""Pair two live captures of one model by identity: the module that ran the work.

When porter ran both sides itself, every op carries the module path porter's own tags
gave it (``porter.module:<path>``: a profiler range in eager, a jax.named_scope under
torchax, compiler provenance under inductor, node metadata in ORT), the same path on
both stacks. So nothing has to be guessed: all of a module's own work on one side
pairs with all of that module's own work on the other (``identity``), over every
profiled step at once. Op-by-op sequence matching inside a module is not attempted: the
two stacks decompose and fuse differently (``aten::linear`` -> ``t`` + ``addmm`` in eager,
one ``dot_general`` under XLA), and pairing single ops is what produced wrapper-vs-GEMM
groups from different steps.

A module with time on one side only (its work was fused into a kernel tagged with an
enclosing module, e.g. an inductor kernel whose nodes span ``output/dense`` and
``output/LayerNorm`` is tagged ``output``) joins its nearest enclosing module, bottom up,
until the group has time on both sides (``identity+enclosing``); what reaches the root
alone stays unmatched. A module whose work the other side folded into another module's
fusion as an epilogue (porter.analysis.split_fused: batch norm and ReLU on a convolution)
joins that module's group first (``identity+fused``).

Wrapper ops (an op whose own kernels or host work belong to child ops: ``aten::linear``
around ``aten::addmm``) never name a group; their self time is dispatch on the host and is
reported per side as ``*_wrapper_us`` (host overhead) in the alignment stats.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from porter.analysis.async_gaps import AsyncGaps, place_async_gaps
from porter.analysis.call_times import calls_apart, measured_calls
from porter.analysis.groups import UNMATCHED, Groups, Strategy
from porter.analysis.optime import OpTimes, op_times
from porter.analysis.outside import is_runtime_range, outside_times
from porter.analysis.split_fused import Split, split_fused
from porter.analysis.step_median import StepMedian, step_median

IDENTITY = "identity"
ENCLOSING = "identity+enclosing"
FUSED = "identity+fused"


def _parent(path: str) -> str:
    return path.rpartition("/")[0]


def _depth(path: str) -> int:
    return path.count("/") + 1 if path else 0


def _rows_by_path(frame: pd.DataFrame, rows: np.ndarray) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    fw = frame["fw"].to_numpy()
    for r, m in zip(rows.tolist(), frame["module"].to_numpy()[rows].tolist()):
        if m == "" and is_runtime_range(fw[r]):
            continue  # torch.compile's runtime ranges: never paired, even with eager work at the root
        out.setdefault(m, []).append(r)
    return out


def identity_strategy(source_absorbed: dict[str, str] | None = None,
                      target_absorbed: dict[str, str] | None = None) -> Strategy:
    """The strategy for porter.analysis.align: one group per module (see the module doc), with
    each side's epilogue map (porter.analysis.split_fused.Split.absorbed)."""
    def pass_identity(g: Groups) -> None:
        _pair(g, source_absorbed or {}, target_absorbed or {})

    return pass_identity


def _destination(path: str, absorbed: dict[str, str]) -> str | None:
    """Where a module's work went, following chains; None when it stayed or the chain cycles."""
    seen, here = {path}, path
    while here in absorbed:
        here = absorbed[here]
        if here in seen:
            return None
        seen.add(here)
    return here if here != path else None


def _pair(g: Groups, source_absorbed: dict[str, str], target_absorbed: dict[str, str]) -> None:
    src = _rows_by_path(g.src, g.free("source"))
    tgt = _rows_by_path(g.tgt, g.free("target"))
    pending: dict[str, tuple[list[int], list[int], str]] = {}
    for path in set(src) | set(tgt):
        pending[path] = (list(src.get(path, [])), list(tgt.get(path, [])), IDENTITY)
        up = path
        while up:  # every enclosing module gets a slot, so rows handed up always reach one
            up = _parent(up)
            pending.setdefault(up, ([], [], IDENTITY))
    # a module whose work a side folded into another module's fusion (an epilogue) joins that
    # module's group with both sides' work, before anything is handed up: what is left of it
    # on its own (a batch norm's scale computation) is no longer the same work as the eager op
    for path in list(pending):
        s_rows, t_rows, _ = pending[path]  # as now: rows moved here earlier move on with it
        into = _destination(path, target_absorbed) or _destination(path, source_absorbed)
        if into is None or into not in pending or not (s_rows or t_rows):
            continue
        ps, pt, _ = pending[into]
        pending[into] = (ps + s_rows, pt + t_rows, FUSED)
        pending[path] = ([], [], IDENTITY)
    # deepest first: a one-sided module hands its rows to its parent before the parent is looked at
    for path in sorted(pending, key=lambda p: (-_depth(p), p)):
        s_rows, t_rows, evidence = pending.pop(path)
        if not (s_rows or t_rows):
            continue
        if s_rows and t_rows:
            g.add(sorted(s_rows), sorted(t_rows), evidence)
            g.rows[-1].update(module=path, target_module=path)
            continue
        if not path:
            continue  # one-sided at the root: unmatched
        up = _parent(path)
        ps, pt, ev = pending.get(up, ([], [], IDENTITY))
        pending[up] = (ps + s_rows, pt + t_rows, ev if ev == FUSED else ENCLOSING)
    _relabel_wrappers(g)


def _relabel_wrappers(g: Groups) -> None:
    """Name each group after its largest non-wrapper op on each side."""
    for side, frame, key_op in (("source", g.src, "framework_op"), ("target", g.tgt, "target_framework_op")):
        wrap = frame["wrapper"].to_numpy()
        time = frame["time"].to_numpy()
        fw = frame["fw"].to_numpy()
        gid = g.src_gid if side == "source" else g.tgt_gid
        order = np.argsort(gid, kind="stable")
        bounds = np.flatnonzero(np.diff(gid[order])) + 1
        for rows in np.split(order, bounds):
            if not len(rows) or gid[rows[0]] < 0:
                continue
            real = rows[~wrap[rows]]
            pick = real if len(real) else rows
            main = pick[int(np.argmax(time[pick]))]
            row = g.rows[int(gid[rows[0]])]
            row[key_op] = fw[main]
            if side == "source":
                row["op_class"] = frame["op_class"].to_numpy()[main]


@dataclass
class LiveSides:
    """A live pair's ops as the identity pass sees them, and what each step of getting
    there measured (for porter.analysis.align's stats). Times are the step medians."""

    source_ops: pd.DataFrame
    target_ops: pd.DataFrame
    source_times: OpTimes
    target_times: OpTimes
    strategy: Strategy
    gaps: dict[str, AsyncGaps]
    split: dict[str, Split]
    medians: dict[str, StepMedian]

    def stats(self, g: Groups) -> dict[str, float]:
        """Host overhead, the estimated splits, placed async gaps, and the unmatched time per
        side: the runtime's outside every module (by kind) and the rest."""
        src, tgt = g.src, g.tgt
        out: dict[str, float] = {  # host overhead: self time of wrapper ops (dispatch; their work is their children's)
            "source_wrapper_us": float(src.loc[src["wrapper"], "time"].sum()),
            "target_wrapper_us": float(tgt.loc[tgt["wrapper"], "time"].sum()),
        }
        for side in ("source", "target"):
            split, raw = self.split[side], self.medians[side].raw_total  # the split placed raw times
            out[f"{side}_split_by_estimate_us"] = split.estimated_us
            out[f"{side}_split_by_estimate_share"] = min(split.estimated_us / raw, 1.0) if raw > 0 else 0.0
            out[f"{side}_split_by_measurement_us"] = split.measured_us
            out[f"{side}_split_by_measurement_share"] = min(split.measured_us / raw, 1.0) if raw > 0 else 0.0
            out[f"{side}_fused_ops_split"] = split.split_ops
            out[f"{side}_async_gap_us"] = self.gaps[side].placed_us  # idle time placed on the op that launched async work
            out[f"{side}_raw_total_us"] = raw  # before each call took its step median
            out[f"{side}_step_median_calls"] = self.medians[side].calls
        for side, frame, gid in (("source", src, g.src_gid), ("target", tgt, g.tgt_gid)):
            # the runtime's work outside every module, by kind (porter.analysis.outside), and the
            # rest of the unmatched time: with coverage, they add up to the side's whole time
            unmatched = gid == UNMATCHED
            kinds = outside_times(frame, unmatched)
            outside = float(sum(kinds.values()))
            total = (self.source_times if side == "source" else self.target_times).total
            other = float(frame["time"].to_numpy()[unmatched].sum()) - outside
            out[f"{side}_unmatched_outside_modules_us"] = outside
            out[f"{side}_unmatched_outside_modules_share"] = outside / total if total > 0 else 0.0
            out[f"{side}_outside_modules_by_kind_us"] = kinds
            out[f"{side}_unmatched_other_us"] = other
            out[f"{side}_unmatched_other_share"] = other / total if total > 0 else 0.0
        return out


def live_sides(source_ops: pd.DataFrame, target_ops: pd.DataFrame) -> LiveSides:
    """XLA:CPU's async work back on its op (porter.analysis.async_gaps), then fused ops' time
    shared among their members' modules by the other side's measured time for the same op calls
    (porter.analysis.call_times, porter.analysis.split_fused), then each op call
    charged its median over the steps (porter.analysis.step_median): one program every step."""
    gaps = {"source": place_async_gaps(source_ops), "target": place_async_gaps(target_ops)}
    other = {"source": "target", "target": "source"}
    timed = {side: op_times(gaps[side].ops) for side in other}
    measured = {side: measured_calls(gaps[side].ops, timed[side]) for side in other}
    split = {side: split_fused(gaps[side].ops, measured[other[side]], calls_apart(gaps[side].ops, timed[side]))
             for side in other}
    ops = {side: split[side].ops for side in ("source", "target")}
    medians = {side: step_median(ops[side], op_times(ops[side])) for side in ("source", "target")}
    strategy = identity_strategy(split["source"].absorbed, split["target"].absorbed)
    return LiveSides(ops["source"], ops["target"], medians["source"].times, medians["target"].times, strategy,
                     gaps, split, medians)
