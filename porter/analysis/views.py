"""Aggregations over the schema tables: device time per op, op shape, module, module kind, class or kernel."""

from __future__ import annotations

import numpy as np
import pandas as pd

from porter.analysis.attribute import with_module_kind
from porter.analysis.opshape import compact
from porter.core.factorize import factorize
from porter.core.units import short_dtypes, short_shapes

GROUPINGS = ("op", "op-shape", "module", "module-kind", "class", "kernel")
KERNEL_ONLY = "kernel: "  # --by op: a kernel no framework op launched, named apart from the ops


def op_shape_keys(ops: pd.DataFrame) -> pd.Series:
    """'aten::mm [[8944,1024],[1024,2816]] bf16' per op: one key per call signature, as read."""
    op = ops["framework_op"].to_numpy(dtype=object)
    op = np.where(op == "", ops["name"].to_numpy(dtype=object), op)
    sig = (ops["input_shapes"].astype(str) + "\x1f" + ops["dtypes"].astype(str)).to_numpy(dtype=object)
    # Hashed, never a fixed-width str array: one megabyte-long shapes arg made np.unique's
    # '<U' copy rows x longest (2,500 x 1 MB chars: 9.3 GiB).
    codes, uniq = factorize(sig)
    text = []
    for u in uniq:
        shapes, dtypes = (compact(x) for x in u.split("\x1f"))
        text.append(" ".join(x for x in (short_shapes(shapes), short_dtypes(dtypes)) if x))
    rest = np.array(text, dtype=object)[codes]
    return pd.Series([f"{a} {b}".strip() for a, b in zip(op, rest)], index=ops.index)


def time_by(ops: pd.DataFrame, kernels: pd.DataFrame, by: str) -> pd.DataFrame:
    """Rows: key, device_us, share, count, host_us (op-level groupings only), sorted by time."""
    if by == "kernel":
        g = kernels.groupby("name", sort=False).agg(device_us=("dur_us", "sum"), count=("dur_us", "size"))
        g["host_us"] = float("nan")
    else:
        col = {"op": "op", "op-shape": "op_shape", "module": "module", "module-kind": "module_kind",
               "class": "op_class"}[by]
        frame = ops
        if by == "op":  # framework ops by name; a kernel without one says so (--by kernel lists kernels)
            fw = ops["framework_op"].to_numpy(dtype=object)
            name = ops["name"].to_numpy(dtype=object)
            frame = ops.assign(op=np.where(fw != "", fw, KERNEL_ONLY + name.astype(str)))
        if by == "module-kind":  # every layer's attention one row: blocks/*/attn
            frame = with_module_kind(ops)
            frame = frame.assign(module_kind=frame["module_kind"].where(frame["module_kind"] != "", "(no module)"))
        if by == "op-shape":
            frame = ops.assign(op_shape=op_shape_keys(ops))
        if by == "module":
            frame = ops.assign(module=ops["module"].where(ops["module"] != "", "(no module)"))
        g = frame.groupby(col, sort=False).agg(
            device_us=("device_us", "sum"), count=("device_us", "size"), host_us=("host_us", "sum")
        )
    total = float(g["device_us"].sum())
    g["share"] = g["device_us"] / total if total > 0 else 0.0
    g = g.sort_values("device_us", ascending=False)
    g.index.name = "key"
    return g.reset_index()[["key", "device_us", "share", "count", "host_us"]]
