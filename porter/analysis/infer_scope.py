"""Give synthetic ops (kernels no op launched) the scope of the op that launches the same kernels.

A trace often opens while the device still runs the previous step: those kernels'
launches are not in the trace, so the reader gives each a synthetic op with no module
(about 30 % of the device time in the Qwen corpus traces). The same run launches the
same kernel sequence again inside the profiled step, so matching kernel names (same run,
same vendor, so names agree exactly) against the linked kernels recovers each one's
module, framework op and class. Matched ops are flagged so reports can say the scope
was inferred.

Linear in events: each run of synthetic kernels on a stream is matched only against the
linked kernels that follow it on that stream, up to the next synthetic run and within
one profiler step (the step whose tail it repeats is the next one); a long trace or a
replicated one has many short runs, never one long comparison of everything against
everything. A synthetic op no block matches takes the op at its place by launch order:
a run continues the previous step, so its kernels line up with the end of the linked
kernels that follow (on the corpus Qwen traces that stand-in agrees with the sequence
match on every op). Both keep framework op and class when the donor has no module, so
traces without module names still charge every kernel to a framework op.
"""

from __future__ import annotations

from dataclasses import dataclass

from cydifflib import SequenceMatcher  # difflib's algorithm in C++: the same blocks, ~20x faster

import numpy as np
import pandas as pd

MIN_BLOCK = 3  # a shorter run of identical kernel names is too weak to name a scope
MAX_WINDOW = 200_000  # linked kernels one run is compared with, when steps do not bound it


@dataclass(frozen=True)
class _Stream:
    """One stream's kernels in device order: name codes, op ids, steps, synthetic flags."""

    codes: np.ndarray
    ops: np.ndarray
    steps: np.ndarray
    syn: np.ndarray


def _runs(flag: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) of each maximal run of True."""
    edges = np.diff(np.concatenate(([0], flag.astype(np.int8), [0])))
    return list(zip(np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist()))


def _window(s: _Stream, end: int, stop: int) -> np.ndarray:
    """Positions of the linked kernels after a run ending at `end`: up to `stop` (the next
    run), within the step of the first of them, at most MAX_WINDOW."""
    pos = np.arange(end, min(stop, end + MAX_WINDOW))
    if not len(pos):
        return pos
    first = s.steps[pos[0]]
    if first >= 0:  # a later step repeats the same kernels: one step is enough
        other = np.flatnonzero((s.steps[pos] >= 0) & (s.steps[pos] != first))
        if len(other):
            pos = pos[:other[0]]
    return pos


def _sequence_votes(s: _Stream, votes: dict[int, list[int]], tail: dict[int, int]) -> None:
    """Each synthetic run against the linked kernels that follow it (or precede it, at the
    end of a stream): matching blocks of at least MIN_BLOCK names vote for donors. tail:
    each synthetic op's stand-in by launch order, the linked kernel as far from the end of
    the window as its first kernel is from the end of its run (a run that continues the
    previous step lines up with the end of the next one)."""
    runs = _runs(s.syn)
    for i, (a, b) in enumerate(runs):
        stop = runs[i + 1][0] if i + 1 < len(runs) else len(s.syn)
        win = _window(s, b, stop)
        if not len(win):  # a run closing the stream: the linked kernels before it
            start = runs[i - 1][1] if i else 0
            win = np.arange(max(start, a - MAX_WINDOW), a)
        if not len(win):
            continue
        for p in range(a, b):
            tail.setdefault(int(s.ops[p]), int(s.ops[win[max(len(win) - (b - p), 0)]]))
        sm = SequenceMatcher(None, s.codes[a:b].tolist(), s.codes[win].tolist(), autojunk=False)
        for blk in sm.get_matching_blocks():
            if blk.size < MIN_BLOCK:
                continue
            for off in range(blk.size):
                votes.setdefault(int(s.ops[a + blk.a + off]), []).append(int(s.ops[win[blk.b + off]]))


def _streams(kernels: pd.DataFrame, syn_ids: np.ndarray) -> list[_Stream]:
    """Each stream holding stand-in kernels, in device order (a sequence is per stream:
    kernels of other streams interleave with it by time but are not its order)."""
    k = kernels.sort_values(["stream", "start_us"], kind="stable")
    codes, _ = pd.factorize(k["name"])
    ops = k["op_id"].to_numpy(dtype=np.int64)
    steps = k["step"].to_numpy(dtype=np.int64)
    syn = np.isin(ops, syn_ids)
    stream = k["stream"].to_numpy()
    cuts = np.flatnonzero(stream[1:] != stream[:-1]) + 1
    bounds = list(zip(np.concatenate(([0], cuts)).tolist(), np.concatenate((cuts, [len(k)])).tolist()))
    return [_Stream(codes[a:b], ops[a:b], steps[a:b], syn[a:b]) for a, b in bounds if syn[a:b].any()]


def infer_synthetic_scopes(ops: pd.DataFrame, kernels: pd.DataFrame) -> tuple[pd.DataFrame, pd.Series]:
    """ops with module/framework_op/op_class filled in for synthetic ops, and each op's donor.

    donor: the op_id of the op whose kernels a synthetic op repeats (or, with no repeat
    found, the op that ran just before it on its stream), -1 where none (several synthetic
    ops can share a donor: an aten::mm's memset and GEMM kernels).
    """
    none = pd.Series(-1, index=ops.index, dtype=np.int64)
    syn_ids = ops.loc[ops["synthetic"] & (ops["module"] == ""), "op_id"].to_numpy(dtype=np.int64)
    if not len(syn_ids) or not len(kernels):
        return ops, none
    streams = _streams(kernels, syn_ids)
    votes: dict[int, list[int]] = {}
    tail: dict[int, int] = {}
    for s in streams:
        _sequence_votes(s, votes, tail)
    donor = {op: max(set(v), key=v.count) for op, v in votes.items()}
    for op, d in tail.items():  # no repeat found: the stand-in by launch order
        donor.setdefault(op, d)
    if not donor:
        return ops, none
    syn = np.fromiter(donor.keys(), dtype=np.int64, count=len(donor))
    best = np.fromiter(donor.values(), dtype=np.int64, count=len(donor))
    op_ids = ops["op_id"].to_numpy()
    pos = pd.Series(np.arange(len(ops)), index=op_ids)
    src, dst = pos.reindex(best).to_numpy(), pos.reindex(syn).to_numpy()
    known = ~(np.isnan(src) | np.isnan(dst))  # a kernel whose op the table lacks donates nothing
    src, dst = src[known].astype(np.int64), dst[known].astype(np.int64)
    # a donor with no scope at all names nothing; one with only a framework op (a trace
    # without module names) still says what the kernel computes
    ok = (ops["module"].to_numpy(dtype=object)[src] != "") | (ops["framework_op"].to_numpy(dtype=object)[src] != "")
    src, dst = src[ok], dst[ok]
    filled = {}
    for col in ("module", "framework_op", "op_class"):
        vals = ops[col].to_numpy(dtype=object).copy()
        vals[dst] = vals[src]
        filled[col] = pd.Series(vals, index=ops.index, dtype=ops[col].dtype)
    out = ops.assign(**filled)  # the other columns shared, not copied (copy-on-write): a 1M-op table is ~200 MB
    donors = np.full(len(ops), -1, dtype=np.int64)
    donors[dst] = op_ids[src]
    return out, pd.Series(donors, index=ops.index)
