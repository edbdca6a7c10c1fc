"""Give synthetic ops (kernels no op launched) the scope of the op that launches the same kernels.

A trace often opens while the device still runs the previous step: those kernels'
launches are not in the trace, so the reader gives each a synthetic op with no module
(about 30 % of the device time in the Qwen corpus traces). The same run launches the
same kernel sequence again inside the profiled step, so matching kernel names (same run,
same vendor, so names agree exactly) against the linked kernels recovers each one's
module, framework op and class. Matched ops are flagged so reports can say the scope
was inferred.
"""

from __future__ import annotations

from cydifflib import SequenceMatcher  # difflib's algorithm in C++: the same blocks, ~20x faster

import numpy as np
import pandas as pd

MIN_BLOCK = 3  # a shorter run of identical kernel names is too weak to name a scope


def infer_synthetic_scopes(ops: pd.DataFrame, kernels: pd.DataFrame) -> tuple[pd.DataFrame, pd.Series]:
    """ops with module/framework_op/op_class filled in for synthetic ops, and each op's donor.

    donor: the op_id of the op whose kernels a synthetic op repeats, -1 where none
    (several synthetic ops can share a donor: an aten::mm's memset and GEMM kernels).
    """
    none = pd.Series(-1, index=ops.index, dtype=np.int64)
    syn_ids = set(ops.loc[ops["synthetic"] & (ops["module"] == ""), "op_id"].tolist())
    if not syn_ids or not len(kernels):
        return ops, none
    k = kernels.sort_values(["start_us"], kind="stable")
    is_syn = k["op_id"].isin(syn_ids).to_numpy()
    names = k["name"].to_numpy()
    op_of = k["op_id"].to_numpy()
    codes = {n: i for i, n in enumerate(pd.unique(names))}
    coded = np.fromiter((codes[n] for n in names), dtype=np.int64, count=len(names))
    syn_seq, lnk_seq = coded[is_syn], coded[~is_syn]
    syn_op, lnk_op = op_of[is_syn], op_of[~is_syn]
    sm = SequenceMatcher(None, syn_seq.tolist(), lnk_seq.tolist(), autojunk=False)
    donor: dict[int, list[int]] = {}
    for blk in sm.get_matching_blocks():
        if blk.size < MIN_BLOCK:
            continue
        for off in range(blk.size):
            donor.setdefault(int(syn_op[blk.a + off]), []).append(int(lnk_op[blk.b + off]))
    if not donor:
        return ops, none
    syn = np.fromiter(donor.keys(), dtype=np.int64, count=len(donor))
    best = np.fromiter((max(set(v), key=v.count) for v in donor.values()), dtype=np.int64, count=len(donor))
    op_ids = ops["op_id"].to_numpy()
    pos = pd.Series(np.arange(len(ops)), index=op_ids)
    src, dst = pos.reindex(best).to_numpy(), pos.reindex(syn).to_numpy()
    module = ops["module"].to_numpy(dtype=object).copy()
    ok = module[src] != ""
    src, dst = src[ok], dst[ok]
    out = ops.copy()
    for col in ("module", "framework_op", "op_class"):
        vals = ops[col].to_numpy(dtype=object).copy()
        vals[dst] = vals[src]
        out[col] = vals
    donors = np.full(len(ops), -1, dtype=np.int64)
    donors[dst] = op_ids[src]
    return out, pd.Series(donors, index=ops.index)
