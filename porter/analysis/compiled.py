"""torch.compile regions against eager ops: one group per region, not a region beside a stray op.

A torch.compile run records a few coarse ops per step (``Torch-Compiled Region: 0/0``,
``CompiledFunction`` / ``CompiledFunctionBackward`` in training, ``## Call CompiledFxGraph
<hash> ##``, with ``TorchDynamo Cache Lookup`` just before) whose time holds a whole
fused graph: generated C++ runs as the graph call's own host time, Triton kernels and
extern calls (``aten::mm``) run beneath it. The eager run of the same model records
hundreds of ops for the same work. Sequence-aligning the two on op class pairs a 16-29 ms
region with the one or two eager ops whose class happens to match its heaviest child, and
ratios reach 1000x. Here each region (with every op beneath it) is one token; the
compiled side's ops outside regions are anchors; aligning tokens per step leaves each
region in a gap with exactly the eager ops that ran between the same anchors, and that
region plus those ops form one group (evidence ``compiled``). Only when one side compiles
and the other does not: two compiled runs pair kernel by kernel as usual.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

REGION = re.compile(r"^(?:Torch-Compiled Region\b|CompiledFunction(?:Backward)?$|## Call CompiledFxGraph\b)")
CACHE_LOOKUP = re.compile(r"^TorchDynamo Cache Lookup$")
TOKEN = "<compiled region>"  # never an op class, so it pairs with nothing


def _names(ops: pd.DataFrame) -> pd.Series:
    return ops["framework_op"].where(ops["framework_op"] != "", ops["name"]).astype(str)


def region_roots(ops: pd.DataFrame) -> pd.Series:
    """op_id -> op_id of the outermost compiled-region op at or above it (-1: outside every region).

    A cache lookup (a sibling just before its region) belongs to the next region that
    starts at or after it in the same step.
    """
    ids = ops["op_id"].to_numpy(np.int64)
    names = _names(ops)
    is_region = names.str.contains(REGION).to_numpy(bool)
    pos = pd.Series(np.arange(len(ops)), index=ids)
    parent = pos.reindex(ops["parent_id"].to_numpy()).fillna(-1).to_numpy(np.int64)
    root = np.where(is_region, ids, -1)
    cur = parent.copy()
    while (cur >= 0).any():  # walk up level by level; the last region met is the outermost
        up = cur >= 0
        hit = up & is_region[np.maximum(cur, 0)]
        root[hit] = ids[cur[hit]]
        cur = np.where(up, parent[np.maximum(cur, 0)], -1)
    lookup = names.str.contains(CACHE_LOOKUP).to_numpy(bool) & (root < 0)
    if lookup.any() and is_region.any():
        start = ops["start_us"].to_numpy(np.float64)
        step = ops["step"].to_numpy()
        top = np.flatnonzero(is_region & (root == ids))
        for i in np.flatnonzero(lookup):
            later = top[(step[top] == step[i]) & (start[top] >= start[i])]
            if len(later):
                root[i] = ids[later[np.argmin(start[later])]]
    return pd.Series(root, index=ids, name="region")


def region_names(ops: pd.DataFrame, roots: pd.Series) -> dict[int, str]:
    """op_id -> name of each region's outermost op (the one a group is named by)."""
    top = roots.to_numpy() == ops["op_id"].to_numpy()
    return dict(zip(ops["op_id"].to_numpy()[top].tolist(), _names(ops)[top].tolist()))


def has_regions(ops: pd.DataFrame) -> bool:
    """Whether a run executed any torch.compile region."""
    return bool(len(ops)) and bool(_names(ops).str.contains(REGION).any())


def tokens(op_class: np.ndarray, region: np.ndarray) -> tuple[list[str], list[list[int]]]:
    """One token per row, except that consecutive rows of one region make one TOKEN.

    Returns the tokens and, per token, the row positions it stands for.
    """
    toks: list[str] = []
    rows: list[list[int]] = []
    last = -1
    for i, (cls, reg) in enumerate(zip(op_class.tolist(), region.tolist())):
        if reg >= 0 and reg == last:
            rows[-1].append(i)
            continue
        toks.append(TOKEN if reg >= 0 else cls)
        rows.append([i])
        last = reg
    return toks, rows
