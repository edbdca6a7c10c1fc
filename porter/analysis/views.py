"""Aggregations over the schema tables: device time per op, module, class or kernel."""

from __future__ import annotations

import pandas as pd

GROUPINGS = ("op", "module", "class", "kernel")


def time_by(ops: pd.DataFrame, kernels: pd.DataFrame, by: str) -> pd.DataFrame:
    """Rows: key, device_us, share, count, host_us (op-level groupings only), sorted by time."""
    if by == "kernel":
        g = kernels.groupby("name", sort=False).agg(device_us=("dur_us", "sum"), count=("dur_us", "size"))
        g["host_us"] = float("nan")
    else:
        col = {"op": "name", "module": "module", "class": "op_class"}[by]
        frame = ops
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
