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
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from porter.analysis.compiled import TOKEN, region_names, region_roots, tokens
from porter.analysis.infer_scope import infer_synthetic_scopes
from porter.analysis.optime import OpTimes, op_times

EVIDENCE: tuple[str, ...] = ("identity", "identity+enclosing", "identity+fused", "compiled", "scope", "scope+fused",
                             "scope~", "scope~+fused", "sequence", "sequence-gap", "name")
UNMATCHED = -1
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

    def coverage(self) -> dict[str, float]:
        """Share of each side's charged time that lies in matched groups. Live pairs leave out
        the host work outside every module that has no counterpart (a compiled stack's guard
        checks and graph wrapper: ``*_unmatched_outside_modules_us``, reported apart)."""
        out = {}
        for side, member, times in (("source", self.source_group, self.source_times),
                                    ("target", self.target_group, self.target_times)):
            matched = times.values.reindex(member.index[member.to_numpy() != UNMATCHED]).sum()
            total = times.total - self.stats.get(f"{side}_unmatched_outside_modules_us", 0.0)
            out[side] = float(matched / total) if total > 0 else 1.0
        return out


# ---------------------------------------------------------------- preparation

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


def _frame(ops: pd.DataFrame, times: OpTimes, donor: pd.Series, region: pd.Series | None = None) -> pd.DataFrame:
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

class _Groups:
    """Accumulates groups and marks ops as taken."""

    def __init__(self, src: pd.DataFrame, tgt: pd.DataFrame, region_names: dict[int, str] | None = None):
        self.src, self.tgt = src, tgt
        self.region_names = region_names or {}  # op_id of a compiled region -> its name
        self.src_gid = np.full(len(src), UNMATCHED, dtype=np.int64)
        self.tgt_gid = np.full(len(tgt), UNMATCHED, dtype=np.int64)
        self.rows: list[dict] = []
        # Plain arrays: per-group pandas indexing is far too slow for thousands of groups.
        self._cols = {side: {c: f[c].to_numpy() for c in ("op_ids", "time", "module", "op_class", "fw", "inferred", "step")}
                      for side, f in (("source", src), ("target", tgt))}
        # and lists for add(): a group holds a few rows, where numpy's per-call cost dominates
        self._lists = {side: {c: cols[c].tolist() for c in ("op_ids", "time", "inferred")}
                       for side, cols in self._cols.items()}

    def add(self, src_rows: Sequence[int], tgt_rows: Sequence[int], evidence: str, compiled: str = "") -> None:
        gid = len(self.rows)
        src_rows, tgt_rows = np.asarray(src_rows, dtype=np.int64), np.asarray(tgt_rows, dtype=np.int64)
        self.src_gid[src_rows] = gid
        self.tgt_gid[tgt_rows] = gid
        s, t = self._cols["source"], self._cols["target"]
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
            "source_ids": [i for r in src_list for i in sl["op_ids"][r]],  # ints already (_frame: tolist)
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


def _emit(g: _Groups, blocks: list[_Block], src_rows: np.ndarray, tgt_rows: np.ndarray,
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


def _align_rows(g: _Groups, src_rows: np.ndarray, tgt_rows: np.ndarray, evidence: str,
                in_scope: bool) -> None:
    """Sequence-align two row sets on op class and emit groups."""
    if not len(src_rows) or not len(tgt_rows):
        return
    # the cached arrays: converting the whole column per scope made this quadratic in scopes
    blocks = align_sequences(g._cols["source"]["op_class"][src_rows], g._cols["target"]["op_class"][tgt_rows])
    if in_scope:
        # Inside one scope, every op belongs to the scope: gaps of any length form groups,
        # and a side's extra ops join their neighbour.
        blocks = _attach_one_sided(blocks, None)
        _emit(g, blocks, src_rows, tgt_rows, evidence, evidence + "+fused", None)
    else:
        blocks = _attach_one_sided(blocks, MAX_ATTACH_RUN)
        _emit(g, blocks, src_rows, tgt_rows, evidence, evidence + "-gap", MAX_GAP_RUN)


def _pass_compiled(g: _Groups) -> None:
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


def _by_step(g: _Groups, side: str, rows: np.ndarray) -> list[np.ndarray]:
    """rows (in step order) cut where the profiler step changes; ops outside steps (-1,
    sorted first: a trace opening mid-step) belong to the first step."""
    steps = g._cols[side]["step"][rows]
    if (steps < 0).any():
        inside = steps[steps >= 0]
        if len(inside):
            steps = np.where(steps < 0, inside[0], steps)
    cuts = np.flatnonzero(steps[1:] != steps[:-1]) + 1
    if not len(cuts):
        return [rows]
    bounds = [0, *cuts.tolist(), len(rows)]
    return [rows[a:b] for a, b in zip(bounds, bounds[1:])]


def _align_scope(g: _Groups, src_rows: np.ndarray, tgt_rows: np.ndarray, evidence: str) -> None:
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


def _pass_scope(g: _Groups) -> None:
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


def _pass_scope_fuzzy(g: _Groups) -> None:
    src_mods = _rows_by_module(g.src, g.free("source"))
    tgt_mods = _rows_by_module(g.tgt, g.free("target"))
    order_s = sorted(src_mods, key=lambda m: src_mods[m][0])
    order_t = sorted(tgt_mods, key=lambda m: tgt_mods[m][0])
    for sm, tm in _pair_modules(order_s, order_t):
        _align_scope(g, src_mods[sm], tgt_mods[tm], "scope~")


def _pass_sequence(g: _Groups) -> None:
    for synthetic in (True, False):
        sr = g.free("source")
        tr = g.free("target")
        sr = sr[g.src["synthetic"].to_numpy()[sr] == synthetic]
        tr = tr[g.tgt["synthetic"].to_numpy()[tr] == synthetic]
        _align_rows(g, sr, tr, "sequence", in_scope=False)


def _pass_names(g: _Groups) -> None:
    sr, tr = g.free("source"), g.free("target")
    s_by: dict[str, list[int]] = {}
    t_by: dict[str, list[int]] = {}
    for r, n in zip(sr.tolist(), g.src["fw"].to_numpy()[sr].tolist()):
        s_by.setdefault(n, []).append(r)
    for r, n in zip(tr.tolist(), g.tgt["fw"].to_numpy()[tr].tolist()):
        t_by.setdefault(n, []).append(r)
    for name in sorted(s_by.keys() & t_by.keys()):
        g.add(s_by[name], t_by[name], "name")


def _membership(frame: pd.DataFrame, gid: np.ndarray) -> pd.Series:
    """op_id -> group_id for every op in the frame's units."""
    sizes = frame["op_ids"].map(len).to_numpy()
    ids = np.fromiter((i for ids in frame["op_ids"] for i in ids), dtype=np.int64, count=int(sizes.sum()))
    return pd.Series(np.repeat(gid, sizes), index=ids, name="group_id")


Strategy = Callable[[_Groups], None]
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
    split, gaps = {}, {}
    if identity:  # XLA:CPU's async work back on its op; then fused ops share their time among their members' modules
        from porter.analysis.align_identity import identity_strategy
        from porter.analysis.async_gaps import place_async_gaps
        from porter.analysis.split_fused import split_fused

        gaps = {"source": place_async_gaps(source_ops), "target": place_async_gaps(target_ops)}
        source_ops, target_ops = gaps["source"].ops, gaps["target"].ops
        split = {"source": split_fused(source_ops), "target": split_fused(target_ops)}
        strategies = (identity_strategy(split["source"].absorbed, split["target"].absorbed),)
        source_ops, target_ops = split["source"].ops, split["target"].ops
    st, tt = op_times(source_ops), op_times(target_ops)
    medians = {}
    if identity:  # one program every step: each op call charged its median over the steps
        from porter.analysis.step_median import step_median

        medians = {"source": step_median(source_ops, st), "target": step_median(target_ops, tt)}
        st, tt = medians["source"].times, medians["target"].times
    s_don = t_don = None
    if source_kernels is not None:
        source_ops, s_don = infer_synthetic_scopes(source_ops, source_kernels)
    if target_kernels is not None:
        target_ops, t_don = infer_synthetic_scopes(target_ops, target_kernels)
    none = lambda ops: pd.Series(-1, index=ops.index, dtype=np.int64)  # noqa: E731
    s_reg, t_reg = region_roots(source_ops), region_roots(target_ops)
    src = _frame(source_ops, st, s_don if s_don is not None else none(source_ops), s_reg)
    tgt = _frame(target_ops, tt, t_don if t_don is not None else none(target_ops), t_reg)
    g = _Groups(src, tgt, {**region_names(source_ops, s_reg), **region_names(target_ops, t_reg)})
    per_pass = {}
    for strategy in strategies:
        before = len(g.rows)
        strategy(g)
        per_pass[strategy.__name__.lstrip("_").removeprefix("pass_")] = len(g.rows) - before
    cols = ["group_id", "evidence", "inferred_scope", "module", "op_class", "framework_op", "target_module",
            "target_framework_op", "compiled", "source_ids", "target_ids"]
    groups = pd.DataFrame(g.rows, columns=cols)
    src_member = _membership(src, g.src_gid)
    tgt_member = _membership(tgt, g.tgt_gid)
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
    if identity:  # host overhead: self time of wrapper ops (dispatch; their work is their children's)
        stats.update(source_wrapper_us=float(src.loc[src["wrapper"], "time"].sum()),
                     target_wrapper_us=float(tgt.loc[tgt["wrapper"], "time"].sum()))
        for side, times in (("source", st), ("target", tt)):
            stats[f"{side}_split_by_estimate_us"] = split[side].estimated_us
            raw = medians[side].raw_total  # the split placed raw times, before the step medians
            stats[f"{side}_split_by_estimate_share"] = min(split[side].estimated_us / raw, 1.0) if raw > 0 else 0.0
            stats[f"{side}_fused_ops_split"] = split[side].split_ops
            stats[f"{side}_async_gap_us"] = gaps[side].placed_us  # idle time placed on the op that launched async work
            stats[f"{side}_raw_total_us"] = medians[side].raw_total  # before each call took its step median
            stats[f"{side}_step_median_calls"] = medians[side].calls
        for side, frame, gid in (("source", src, g.src_gid), ("target", tgt, g.tgt_gid)):
            # host work outside every module with nothing like it on the other side
            # (a compiled stack's guard checks and graph wrappers): unmatched, said how much
            alone = (gid == UNMATCHED) & (frame["module"].to_numpy() == "")
            stats[f"{side}_unmatched_outside_modules_us"] = outside = float(frame["time"].to_numpy()[alone].sum())
            total = st.total if side == "source" else tt.total
            stats[f"{side}_unmatched_outside_modules_share"] = outside / total if total > 0 else 0.0
    calls = None
    if identity:  # inside each module, op calls paired by identity (module, op, call index)
        from porter.analysis.op_calls import op_call_table

        calls = op_call_table(source_ops, st, target_ops, tt)
        stats["op_calls"] = int(len(calls))
        for side, times in (("source", st), ("target", tt)):  # share of the side's time paired call by call
            paired = calls.loc[calls["evidence"] == "identity-call", f"{side}_us"].sum()
            per_step = times.total / max(1, medians[side].steps)
            stats[f"{side}_op_calls_identity_share"] = float(min(paired / per_step, 1.0)) if per_step > 0 else 0.0
    return Alignment(groups, src_member, tgt_member, st, tt, source_ops, target_ops, stats, calls)


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
