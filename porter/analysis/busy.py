"""Busy time: how long each device had any work, against the sum of its kernel durations.

Summing kernel durations counts twice whatever ran at once on two streams (an NCCL
all-reduce beside a GEMM, a copy stream beside compute): on multi-stream training traces
that overstates the time the device was busy by 16-25%. Busy time is the length of the
union of the device's kernel intervals; overlap is the difference. Sorted-sweep union,
O(n log n), per device and per profiled step. A CPU-only trace's rows are ops' self CPU
times placed at the op's start (profilers/kineto_link.cpu_as_device), not intervals: they
count as busy in full, with no overlap.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

from porter.core.run import Run

OVERLAP_MATTERS = 0.01  # overlap above 1% of kernel time: compare sides by busy time


def union_length(start: np.ndarray, end: np.ndarray) -> float:
    """Total length covered by [start, end) intervals (any order, any overlap)."""
    if len(start) == 0:
        return 0.0
    order = np.argsort(start, kind="stable")
    s, e = np.asarray(start, np.float64)[order], np.asarray(end, np.float64)[order]
    reach = np.maximum.accumulate(e)  # furthest end seen so far
    # a new covered run starts where an interval begins after everything before it ended
    new_run = np.empty(len(s), dtype=bool)
    new_run[0] = True
    new_run[1:] = s[1:] > reach[:-1]
    run_id = np.cumsum(new_run) - 1
    run_start = s[new_run]
    run_end = pd.Series(reach).groupby(run_id).max().to_numpy()
    return float((run_end - run_start).sum())


def busy_by(kernels: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per value of keys: busy_us (union), kernel_us (sum), overlap_us, kernels."""
    k = kernels[kernels["dur_us"] > 0]
    rows = []
    for key, g in k.groupby(keys, sort=True):
        start = g["start_us"].to_numpy(np.float64)
        total = float(g["dur_us"].sum())
        host = (g["device_id"].to_numpy() < 0) & ((g["stream"].to_numpy() < 0) if "stream" in g else True)
        # host self-time rows (a CPU-only trace) start where their op starts, so a parent's row
        # covers its children's starts: no interval union, their sum is the busy time
        busy = union_length(start[~host], start[~host] + g["dur_us"].to_numpy(np.float64)[~host]) + float(
            g["dur_us"].to_numpy(np.float64)[host].sum())
        rows.append({**dict(zip(keys, key if isinstance(key, tuple) else (key,))),
                     "busy_us": busy, "kernel_us": total, "overlap_us": max(total - busy, 0.0), "kernels": int(len(g))})
    return pd.DataFrame(rows, columns=[*keys, "busy_us", "kernel_us", "overlap_us", "kernels"])


def side_busy(kernels: pd.DataFrame, device: tuple[str, ...] = ("device_id",)) -> dict[str, Any]:
    """One run's busy block: per device, per step (device busy time summed over devices), totals.
    device: the columns that name one device (a multi-rank job's are (rank, device_id))."""
    if kernels.empty:
        return {"devices": [], "busy_us": 0.0, "kernel_us": 0.0, "overlap_us": 0.0, "overlap_share": None,
                "per_step_busy_us": []}
    dev = busy_by(kernels, list(device))
    steps = busy_by(kernels[kernels["step"] >= 0], ["step", *device]).groupby("step")["busy_us"].sum()
    busy, total = float(dev["busy_us"].sum()), float(dev["kernel_us"].sum())
    return {"devices": dev.to_dict(orient="records"), "busy_us": busy, "kernel_us": total,
            "overlap_us": max(total - busy, 0.0), "overlap_share": max(total - busy, 0.0) / total if total > 0 else None,
            "per_step_busy_us": [float(v) for v in steps.to_numpy()]}


def run_busy(run: Run) -> dict[str, Any]:
    """side_busy of one Run; the devices of a job's ranks are told apart by rank (each rank's
    device 0 is another device)."""
    return side_busy(run.kernels, ("rank", "device_id") if run.ranks() else ("device_id",))


def runs_busy(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """Each run's busy block, labelled: the per-run view the pairwise block is made of."""
    return [{"label": r.label, "role": r.role, "rank": r.rank, **run_busy(r)} for r in runs]


def busy_block(source: Run, target: Run) -> dict[str, Any]:
    """diagnosis.json `busy`: both sides, and the ratio the headline should use when streams overlap."""
    s, t = run_busy(source), run_busy(target)
    overlapped = any((x["overlap_share"] or 0.0) > OVERLAP_MATTERS for x in (s, t))
    return {"source": s, "target": t, "streams_overlap": overlapped,
            "busy_ratio": t["busy_us"] / s["busy_us"] if s["busy_us"] > 0 else None,
            "kernel_sum_ratio": t["kernel_us"] / s["kernel_us"] if s["kernel_us"] > 0 else None}
