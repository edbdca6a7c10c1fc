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
alone stays unmatched.

Wrapper ops (an op whose own kernels or host work belong to child ops: ``aten::linear``
around ``aten::addmm``) never name a group; their self time is dispatch on the host and is
reported per side as ``*_wrapper_us`` (host overhead) in the alignment stats.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from porter.analysis.align import _Groups

IDENTITY = "identity"
ENCLOSING = "identity+enclosing"


def _parent(path: str) -> str:
    return path.rpartition("/")[0]


def _depth(path: str) -> int:
    return path.count("/") + 1 if path else 0


def _rows_by_path(frame: pd.DataFrame, rows: np.ndarray) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for r, m in zip(rows.tolist(), frame["module"].to_numpy()[rows].tolist()):
        out.setdefault(m, []).append(r)
    return out


def pass_identity(g: _Groups) -> None:
    """Strategy for porter.analysis.align: one group per module (see the module doc)."""
    src = _rows_by_path(g.src, g.free("source"))
    tgt = _rows_by_path(g.tgt, g.free("target"))
    pending: dict[str, tuple[list[int], list[int], bool]] = {}
    for path in set(src) | set(tgt):
        pending[path] = (list(src.get(path, [])), list(tgt.get(path, [])), False)
        up = path
        while up:  # every enclosing module gets a slot, so rows handed up always reach one
            up = _parent(up)
            pending.setdefault(up, ([], [], False))
    # deepest first: a one-sided module hands its rows to its parent before the parent is looked at
    for path in sorted(pending, key=lambda p: (-_depth(p), p)):
        s_rows, t_rows, merged = pending.pop(path)
        if not (s_rows or t_rows):
            continue
        if s_rows and t_rows:
            g.add(sorted(s_rows), sorted(t_rows), ENCLOSING if merged else IDENTITY)
            g.rows[-1].update(module=path, target_module=path)
            continue
        if not path:
            continue  # one-sided at the root: unmatched
        up = _parent(path)
        ps, pt, _ = pending.get(up, ([], [], False))
        pending[up] = (ps + s_rows, pt + t_rows, True)
    _relabel_wrappers(g)


def _relabel_wrappers(g: _Groups) -> None:
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
