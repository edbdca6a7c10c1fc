"""Match the ops of a source run to the ops of a target run.

Evidence, strongest first (each pass only sees what earlier passes left):

1. ``scope``: same module path on both sides (ops a framework ran outside any module,
   e.g. the model's own forward, share the root scope ''); inside it the ops (in time order) are
   sequence-aligned on op class, so vendor variants (aten::cudnn_convolution vs
   aten::miopen_convolution) pair up. Ops a side has in addition, between two pairs,
   join their neighbour's group (``scope+fused``): that is how several aten ops land on
   the one fused HLO op that replaced them.
2. ``scope~``: module paths that differ only by a prefix (``jit(f)/fc1`` vs ``fc1``) or
   by instance numbering, then as in 1.
3. ``sequence``: what is left, in time order per side, sequence-aligned on op class
   (separately for synthetic ops, i.e. kernels no op launched, on the device timeline,
   and for other ops on the host timeline). A short run of ops between two pairs on both
   sides forms one many-to-many group (``sequence-gap``).
4. ``name``: remaining ops with the same framework op name, one group per name.

Unit of alignment: all profiled steps at once, ops ordered by (step, start). A step's
program repeats, so the sequence alignment pairs step k with step k; group times are
totals over the profiled steps (attribute divides by the step count). Ops charged zero
time (parents whose kernels belong to children, ops that launch nothing) take no part:
they cannot move coverage and would only lengthen the sequences.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from cydifflib import SequenceMatcher  # difflib's algorithm in C++: the same blocks, ~20x faster
from typing import TYPE_CHECKING, Sequence

import numpy as np
import pandas as pd

from porter.analysis.compiled import TOKEN, region_names, region_roots, tokens
from porter.analysis.groups import UNMATCHED, Groups, Strategy, membership, unit_frame
from porter.analysis.infer_scope import infer_synthetic_scopes
from porter.analysis.optime import OpTimes, op_times

if TYPE_CHECKING:
    from porter.analysis.align_identity import LiveSides

EVIDENCE: tuple[str, ...] = ("identity", "identity+enclosing", "identity+fused", "compiled", "scope", "scope+fused",
                             "scope~", "scope~+fused", "sequence", "sequence-gap", "name")
MAX_GAP_RUN = 16  # longest run (per side) a sequence-gap group may span
MAX_ATTACH_RUN = 4  # longest one-sided run attached to a neighbour outside a scope


@dataclass
class Alignment:
    """Matched groups and each op's group; ops absent from a membership were not aligned (zero time)."""

    groups: pd.DataFrame  # group_id, evidence, module, op_class, framework_op, target_framework_op, source_ids, target_ids
    source_group: pd.Series  # op_id -> group_id (UNMATCHED when no match)
    target_group: pd.Series
    source_times: OpTimes
    target_times: OpTimes
    source_ops: pd.DataFrame  # the ops as aligned: synthetic ops carry inferred scopes
    target_ops: pd.DataFrame
    stats: dict = field(default_factory=dict)
    op_calls: pd.DataFrame | None = None  # live pairs: each op call on both sides (porter.analysis.op_calls)

    def coverage(self, less_outside: bool = False) -> dict[str, float]:
        """Share of each side's whole charged time that lies in matched groups. The time outside
        every module (a live pair's runtime work: guard checks, graph wrapper, transfers;
        ``*_unmatched_outside_modules_us``, porter.analysis.outside) stays in the denominator, so
        coverage + that share + the other unmatched share is 1; ``less_outside`` takes it out
        (whether two runs do the same work: porter.analysis.paircheck)."""
        out = {}
        for side, member, times in (("source", self.source_group, self.source_times),
                                    ("target", self.target_group, self.target_times)):
            matched = times.values.reindex(member.index[member.to_numpy() != UNMATCHED]).sum()
            total = times.total - (self.stats.get(f"{side}_unmatched_outside_modules_us", 0.0) if less_outside else 0.0)
            out[side] = float(matched / total) if total > 0 else 1.0
        return out


# ---------------------------------------------------------------- module paths

_INSTANCE = re.compile(r"_\d+$")
_WRAPPER = re.compile(r"^(nn\.Module: |porter\.module:|jit\([^)]*\)$|pjit\([^)]*\)$)")


def scope_parts(module: str) -> tuple[str, ...]:
    """Module path components without wrapper prefixes (jit(f), nn.Module: ...)."""
    parts = []
    for p in module.split("/"):
        p = _WRAPPER.sub("", p).strip()
        if p:
            parts.append(p)
    return tuple(parts)


# ---------------------------------------------------------------- sequence alignment

@dataclass
class _Block:
    src: list[int]  # positions into the source list
    tgt: list[int]
    kind: str  # "pair" or "gap"


def align_sequences(src: Sequence[str], tgt: Sequence[str]) -> list[_Block]:
    """Pairs from the longest common subsequence of tokens, plus gaps that have both sides."""
    sm = SequenceMatcher(None, list(src), list(tgt), autojunk=False)
    blocks: list[_Block] = []
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag == "equal":
            blocks.extend(_Block([i1 + k], [j1 + k], "pair") for k in range(i2 - i1))
        elif tag == "replace":
            blocks.append(_Block(list(range(i1, i2)), list(range(j1, j2)), "gap"))
        elif tag == "delete":
            blocks.append(_Block(list(range(i1, i2)), [], "gap"))
        else:
            blocks.append(_Block([], list(range(j1, j2)), "gap"))
    return blocks


def _attach_one_sided(blocks: list[_Block], max_run: int | None) -> list[_Block]:
    """Merge one-sided gaps into the previous two-sided block (the next one at the start)."""
    out: list[_Block] = []
    pending: list[_Block] = []
    for b in blocks:
        one_sided = not (b.src and b.tgt)
        if one_sided and (max_run is None or max(len(b.src), len(b.tgt)) <= max_run):
            if out:
                out[-1].src += b.src
                out[-1].tgt += b.tgt
                out[-1].kind += "+fused" if not out[-1].kind.endswith("+fused") else ""
            else:
                pending.append(b)
            continue
        if one_sided:
            continue  # too long to attach: left for later passes
        if pending:
            for p in pending:
                b.src = p.src + b.src
                b.tgt = p.tgt + b.tgt
            b.kind += "+fused"
            pending = []
        out.append(b)
    return out


# ---------------------------------------------------------------- grouping

def _emit(g: Groups, blocks: list[_Block], src_rows: np.ndarray, tgt_rows: np.ndarray,
          pair_ev: str, gap_ev: str | None, max_gap: int | None) -> None:
    for b in blocks:
        if not (b.src and b.tgt):
            continue
        if b.kind.startswith("pair"):
            ev = pair_ev + ("+fused" if b.kind.endswith("+fused") else "")
        else:
            if gap_ev is None or (max_gap is not None and max(len(b.src), len(b.tgt)) > max_gap):
                continue
            ev = gap_ev
        g.add(src_rows[b.src], tgt_rows[b.tgt], ev)


def _align_rows(g: Groups, src_rows: np.ndarray, tgt_rows: np.ndarray, evidence: str,
                in_scope: bool) -> None:
    """Sequence-align two row sets on op class and emit groups."""
    if not len(src_rows) or not len(tgt_rows):
        return
    # the cached arrays: converting the whole column per scope made this quadratic in scopes
    blocks = align_sequences(g.cols["source"]["op_class"][src_rows], g.cols["target"]["op_class"][tgt_rows])
    if in_scope:
        # Inside one scope, every op belongs to the scope: gaps of any length form groups,
        # and a side's extra ops join their neighbour.
        blocks = _attach_one_sided(blocks, None)
        _emit(g, blocks, src_rows, tgt_rows, evidence, evidence + "+fused", None)
    else:
        blocks = _attach_one_sided(blocks, MAX_ATTACH_RUN)
        _emit(g, blocks, src_rows, tgt_rows, evidence, evidence + "-gap", MAX_GAP_RUN)


def _pass_compiled(g: Groups) -> None:
    """Where one side runs torch.compile regions and the other does not: each region and the
    other side's ops between the same anchors form one group (porter.analysis.compiled)."""
    has = {side: bool((f["region"].to_numpy() >= 0).any()) for side, f in (("source", g.src), ("target", g.tgt))}
    if has["source"] == has["target"]:
        return
    comp = "source" if has["source"] else "target"
    sr, tr = g.free("source"), g.free("target")
    s_step, t_step = g.src["step"].to_numpy()[sr], g.tgt["step"].to_numpy()[tr]
    same_steps = set(s_step.tolist()) == set(t_step.tolist())
    batches = ([(sr[s_step == k], tr[t_step == k]) for k in sorted(set(s_step.tolist()))] if same_steps
               else [(sr, tr)])
    for s_rows, t_rows in batches:
        if not len(s_rows) or not len(t_rows):
            continue
        side_tok = {}
        for side, frame, rows in (("source", g.src, s_rows), ("target", g.tgt, t_rows)):
            cls = frame["op_class"].to_numpy()[rows]
            reg = frame["region"].to_numpy()[rows] if side == comp else np.full(len(rows), -1)
            side_tok[side] = tokens(cls, reg)
        (s_tok, s_pos), (t_tok, t_pos) = side_tok["source"], side_tok["target"]
        for b in _attach_one_sided(align_sequences(s_tok, t_tok), None):
            toks = s_tok if comp == "source" else t_tok
            if not (b.src and b.tgt) or TOKEN not in (toks[i] for i in (b.src if comp == "source" else b.tgt)):
                continue
            g.add(s_rows[[r for i in b.src for r in s_pos[i]]], t_rows[[r for i in b.tgt for r in t_pos[i]]],
                  "compiled", compiled=comp)


def _by_step(g: Groups, side: str, rows: np.ndarray) -> list[np.ndarray]:
    """rows (in step order) cut where the profiler step changes; ops outside steps (-1,
    sorted first: a trace opening mid-step) belong to the first step."""
    steps = g.cols[side]["step"][rows]
    if (steps < 0).any():
        inside = steps[steps >= 0]
        if len(inside):
            steps = np.where(steps < 0, inside[0], steps)
    cuts = np.flatnonzero(steps[1:] != steps[:-1]) + 1
    if not len(cuts):
        return [rows]
    bounds = [0, *cuts.tolist(), len(rows)]
    return [rows[a:b] for a, b in zip(bounds, bounds[1:])]


def _align_scope(g: Groups, src_rows: np.ndarray, tgt_rows: np.ndarray, evidence: str) -> None:
    """One scope's ops aligned step by step, the k-th profiled step of each side together
    (a longer side's extra steps join its last one): the sequence matcher's time grows with
    the square of a sequence of few distinct op classes, so one sequence over all the steps
    of a long trace would not end. One step per side is the whole scope, as before."""
    s_parts, t_parts = _by_step(g, "source", src_rows), _by_step(g, "target", tgt_rows)
    n = min(len(s_parts), len(t_parts))
    if n <= 1:
        _align_rows(g, src_rows, tgt_rows, evidence, in_scope=True)
        return
    s_parts[n - 1:] = [np.concatenate(s_parts[n - 1:])]
    t_parts[n - 1:] = [np.concatenate(t_parts[n - 1:])]
    for s, t in zip(s_parts, t_parts):
        _align_rows(g, s, t, evidence, in_scope=True)


def _rows_by_module(frame: pd.DataFrame, rows: np.ndarray, root: bool = False) -> dict[str, np.ndarray]:
    """Rows per module path; with root, ops outside any module (not synthetic) form scope ''."""
    mods = frame["module"].to_numpy()[rows]
    syn = frame["synthetic"].to_numpy()[rows]
    out: dict[str, list[int]] = {}
    for r, m, sy in zip(rows.tolist(), mods.tolist(), syn.tolist()):
        if m or (root and not sy):
            out.setdefault(m, []).append(r)
    return {m: np.asarray(v, dtype=np.int64) for m, v in out.items()}


def _pass_scope(g: Groups) -> None:
    src_mods = _rows_by_module(g.src, g.free("source"), root=True)
    tgt_mods = _rows_by_module(g.tgt, g.free("target"), root=True)
    for mod in (m for m in src_mods if m in tgt_mods):  # source order: group ids must not depend on str hashing
        _align_scope(g, src_mods[mod], tgt_mods[mod], "scope")


def _scope_key(module: str) -> tuple[str, ...]:
    return tuple(_INSTANCE.sub("", p).lower() for p in scope_parts(module))


def _pair_modules(src_mods: list[str], tgt_mods: list[str]) -> list[tuple[str, str]]:
    """Pair modules whose component paths agree up to a prefix and instance numbering.

    A source module pairs with the target module whose key is the longest suffix match,
    only when that match is unique and at least one component long; when several
    modules on a side share a key, they pair in order of first appearance.
    """
    def keyed(mods: list[str]) -> dict[tuple[str, ...], list[str]]:
        d: dict[tuple[str, ...], list[str]] = {}
        for m in mods:
            d.setdefault(_scope_key(m), []).append(m)
        return d

    sk, tk = keyed(src_mods), keyed(tgt_mods)
    pairs: list[tuple[str, str]] = []
    used_t: set[tuple[str, ...]] = set()
    for skey, smods in sk.items():
        best, best_len = None, 0
        for tkey in tk:
            if tkey in used_t:
                continue
            n = 0
            while n < min(len(skey), len(tkey)) and skey[-1 - n] == tkey[-1 - n]:
                n += 1
            whole = n == min(len(skey), len(tkey))
            if whole and n > best_len:
                best, best_len = tkey, n
            elif whole and n == best_len:
                best = None  # ambiguous
        if best is not None and best_len > 0:
            used_t.add(best)
            pairs.extend(zip(smods, tk[best]))
    return pairs


def _pass_scope_fuzzy(g: Groups) -> None:
    src_mods = _rows_by_module(g.src, g.free("source"))
    tgt_mods = _rows_by_module(g.tgt, g.free("target"))
    order_s = sorted(src_mods, key=lambda m: src_mods[m][0])
    order_t = sorted(tgt_mods, key=lambda m: tgt_mods[m][0])
    for sm, tm in _pair_modules(order_s, order_t):
        _align_scope(g, src_mods[sm], tgt_mods[tm], "scope~")


def _pass_sequence(g: Groups) -> None:
    for synthetic in (True, False):
        sr = g.free("source")
        tr = g.free("target")
        sr = sr[g.src["synthetic"].to_numpy()[sr] == synthetic]
        tr = tr[g.tgt["synthetic"].to_numpy()[tr] == synthetic]
        _align_rows(g, sr, tr, "sequence", in_scope=False)


def _pass_names(g: Groups) -> None:
    sr, tr = g.free("source"), g.free("target")
    s_by: dict[str, list[int]] = {}
    t_by: dict[str, list[int]] = {}
    for r, n in zip(sr.tolist(), g.src["fw"].to_numpy()[sr].tolist()):
        s_by.setdefault(n, []).append(r)
    for r, n in zip(tr.tolist(), g.tgt["fw"].to_numpy()[tr].tolist()):
        t_by.setdefault(n, []).append(r)
    for name in sorted(s_by.keys() & t_by.keys()):
        g.add(s_by[name], t_by[name], "name")


DEFAULT_STRATEGIES: tuple[Strategy, ...] = (_pass_compiled, _pass_scope, _pass_scope_fuzzy, _pass_sequence, _pass_names)


def align(source_ops: pd.DataFrame, target_ops: pd.DataFrame,
          source_kernels: pd.DataFrame | None = None, target_kernels: pd.DataFrame | None = None,
          strategies: Sequence[Strategy] = DEFAULT_STRATEGIES, identity: bool = False) -> Alignment:
    """Align two runs' ops tables (schema frames) into matched groups.

    With the kernels tables, synthetic ops first get the scope of the op that launches
    the same kernels in the same run (porter.analysis.infer_scope). identity: both are
    live captures of one model, so ops pair by the module porter tagged them with
    (porter.analysis.align_identity) instead of the heuristic passes.
    """
    live = None
    if identity:  # XLA:CPU's async work on its op, fused ops shared out, each call its step median
        from porter.analysis.align_identity import live_sides

        live = live_sides(source_ops, target_ops)
        source_ops, target_ops, strategies = live.source_ops, live.target_ops, (live.strategy,)
        st, tt = live.source_times, live.target_times
    else:
        st, tt = op_times(source_ops), op_times(target_ops)
    s_don = t_don = None
    if source_kernels is not None:
        source_ops, s_don = infer_synthetic_scopes(source_ops, source_kernels)
    if target_kernels is not None:
        target_ops, t_don = infer_synthetic_scopes(target_ops, target_kernels)
    none = lambda ops: pd.Series(-1, index=ops.index, dtype=np.int64)  # noqa: E731
    s_reg, t_reg = region_roots(source_ops), region_roots(target_ops)
    src = unit_frame(source_ops, st, s_don if s_don is not None else none(source_ops), s_reg)
    tgt = unit_frame(target_ops, tt, t_don if t_don is not None else none(target_ops), t_reg)
    g = Groups(src, tgt, {**region_names(source_ops, s_reg), **region_names(target_ops, t_reg)})
    per_pass = {}
    for strategy in strategies:
        before = len(g.rows)
        strategy(g)
        per_pass[strategy.__name__.lstrip("_").removeprefix("pass_")] = len(g.rows) - before
    cols = ["group_id", "evidence", "inferred_scope", "module", "op_class", "framework_op", "target_module",
            "target_framework_op", "compiled", "source_ids", "target_ids"]
    groups = pd.DataFrame(g.rows, columns=cols)
    src_member = membership(src, g.src_gid)
    tgt_member = membership(tgt, g.tgt_gid)
    stats = {
        "groups": len(groups),
        "groups_per_pass": per_pass,
        "source_ops_aligned": int(len(src_member)),
        "target_ops_aligned": int(len(tgt_member)),
        "source_ops_zero_time": int(len(source_ops) - len(src_member)),
        "target_ops_zero_time": int(len(target_ops) - len(tgt_member)),
        "source_units_scope_inferred": int(src["inferred"].sum()),
        "target_units_scope_inferred": int(tgt["inferred"].sum()),
    }
    calls = None
    if live is not None:
        stats.update(live.stats(g))
        calls = _op_calls(source_ops, target_ops, live, stats)
    return Alignment(groups, src_member, tgt_member, st, tt, source_ops, target_ops, stats, calls)


def _op_calls(source_ops: pd.DataFrame, target_ops: pd.DataFrame, live: LiveSides, stats: dict) -> pd.DataFrame:
    """Inside each module, op calls paired by identity (module, op, call index); stats gets
    their count and the share of each side's time per step so paired. Here, not in
    align_identity: op_calls builds on align_identity."""
    from porter.analysis.op_calls import op_call_table

    st, tt = live.source_times, live.target_times
    calls = op_call_table(source_ops, st, target_ops, tt)
    stats["op_calls"] = int(len(calls))
    for side, times in (("source", st), ("target", tt)):
        paired = calls.loc[calls["evidence"] == "identity-call", f"{side}_us"].sum()
        per_step = times.total / max(1, live.medians[side].steps)
        stats[f"{side}_op_calls_identity_share"] = float(min(paired / per_step, 1.0)) if per_step > 0 else 0.0
    return calls


def unmatched(al: Alignment, ops: pd.DataFrame, side: str, top: int = 20) -> pd.DataFrame:
    """The largest unmatched ops of one side, aggregated by (framework op, module, class)."""
    member = al.source_group if side == "source" else al.target_group
    times = al.source_times if side == "source" else al.target_times
    ids = member.index[member.to_numpy() == UNMATCHED]
    f = ops.set_index("op_id").loc[ids, ["name", "framework_op", "module", "op_class"]].copy()
    f["time_us"] = times.values.reindex(ids).to_numpy()
    f["fw"] = f["framework_op"].where(f["framework_op"] != "", f["name"])
    by = f.groupby(["fw", "module", "op_class"], sort=False)
    agg = (pd.DataFrame({"time_us": by["time_us"].sum(), "count": by["time_us"].size()}).reset_index()
           .rename(columns={"fw": "framework_op"}))
    agg["share"] = agg["time_us"] / times.total if times.total > 0 else 0.0
    return agg.sort_values("time_us", ascending=False).head(top).reset_index(drop=True)
