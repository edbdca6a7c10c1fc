"""Each op call's identity in a live capture: (module, canonical op, call index in the module).

The calls a module's forward makes itself are the ones both stacks see alike: eager records
``aten::linear`` with its ``aten::t`` and ``aten::addmm`` inside it, torchax lowers
``linear`` whole, inductor fuses. So an op call's identity is that of the top-level op it
is (or lies inside): a wrapper's compute child (``aten::addmm`` under ``aten::linear``)
carries its wrapper's identity. Names are canonical (porter.core.opclass.canonical_op) and
the index counts calls of that op in that module within one step, in time order
(porter.analysis.step_median.call_index: one place for the key). The xla stack writes the
same key into HLO metadata (porter.targets.call_tags).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from porter.analysis.step_median import call_index
from porter.core.opclass import canonical_op


def top_level(ops: pd.DataFrame) -> np.ndarray:
    """Rows of framework ops (``ns::op``) a module's forward called itself: no parent op, or a
    parent in another module (the call crossed into a child module's range)."""
    named = ops["name"].astype(str).str.contains("::", regex=False).to_numpy()
    pos = pd.Series(np.arange(len(ops)), index=ops["op_id"].to_numpy())
    parent = pos.reindex(ops["parent_id"].to_numpy()).to_numpy()
    has = ~np.isnan(parent)
    module = ops["module"].to_numpy()
    same = np.zeros(len(ops), dtype=bool)
    p = parent[has].astype(np.int64)
    same[has] = (module[p] == module[has]) & named[p]
    return named & ~same


def call_keys(ops: pd.DataFrame) -> pd.DataFrame:
    """op_id -> (module, op, k) for every op call: top-level ops by themselves, every op inside
    one (its decomposition, its kernels) by the top-level op it lies in. Columns: op_id,
    module, op, k, top (the op is the call itself)."""
    top = top_level(ops)
    f = ops.loc[top, ["op_id", "step", "module", "name", "start_us"]].copy()
    f["name"] = f["name"].map(canonical_op)
    k = call_index(f)
    key = pd.DataFrame({"module": f["module"].to_numpy(), "op": f["name"].to_numpy(),
                        "k": k.reindex(f["op_id"].to_numpy()).to_numpy()}, index=f["op_id"].to_numpy())
    # walk each op up to its top-level ancestor (row positions; -1: none)
    pos = pd.Series(np.arange(len(ops)), index=ops["op_id"].to_numpy())
    parent = pos.reindex(ops["parent_id"].to_numpy()).fillna(-1).to_numpy(dtype=np.int64)
    cur = np.arange(len(ops))
    for _ in range(64):  # nesting depth of framework ops is small
        move = (cur >= 0) & ~top[np.maximum(cur, 0)]
        if not move.any():
            break
        cur[move] = parent[cur[move]]
    ids = ops["op_id"].to_numpy()
    owner = np.where(cur >= 0, ids[np.maximum(cur, 0)], -1)
    found = key.reindex(owner)
    out = pd.DataFrame({"op_id": ids, "module": found["module"].to_numpy(),
                        "op": found["op"].to_numpy(), "k": found["k"].to_numpy(), "top": top})
    return out.dropna(subset=["op"]).reset_index(drop=True)
