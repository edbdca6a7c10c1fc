"""XLA:CPU's asynchronous work charged back to the op that launched it (live pairs only).

XLA:CPU's thunk runtime runs a convolution or dot on its worker pool and returns before the
work is done: the traced event of ``convolution.1`` can last 20 us while the convolution
runs for 7 ms with no event on any traced thread, until the next op that needs its result
starts. Measured on resnet_wide (8x3x64x64, one intra-op thread): layer1/conv1's event took
5724, 42, 3022, 21 and 27 us in five profiled steps, and 3-15 ms per step passed with no op
running on any thread right after layer1's two convolutions; charged only its events, layer1 read 17 us on XLA
against 10 ms eager (a 600x "gap" the other way, where alone both are milliseconds).

Here, in each profiled step of an XLA:CPU capture, every stretch of at least ``MIN_GAP_US``
during which no op runs on any thread is added to the most recent matmul or convolution op
(a fusion holding one included) that started before it in that step: the work the program
was waiting on. Shorter stretches (the executor moving between thunks) stay uncharged, as
on every stack. ``AsyncGaps.placed_us`` says how much time was placed this way, and the ops
table's ``device_us`` keeps the rest of its meaning (the op's own events). Other stacks and
recorded traces pass through unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

MIN_GAP_US = 50.0  # shorter idle stretches are the executor between thunks, not async work
HEAVY = ("matmul", "conv")


@dataclass(frozen=True)
class AsyncGaps:
    ops: pd.DataFrame  # device_us of launching ops raised by the idle time after them
    placed_us: float  # time placed on ops from idle stretches (all steps)
    gaps: int  # idle stretches placed


def is_async_cpu(ops: pd.DataFrame) -> bool:
    """An XLA:CPU capture: ops on host threads with device time, named so by the XPlane reader."""
    return (len(ops) > 0 and "device_name" in ops.columns
            and bool(ops["device_name"].astype(str).str.startswith("XLA:CPU").all())
            and float(ops["device_us"].sum()) > 0)


def _step_gaps(start: np.ndarray, dur: np.ndarray, heavy: np.ndarray) -> list[tuple[int, float]]:
    """(row index of the launching op, idle time) for each idle stretch of one step; rows are
    in start order."""
    end = np.maximum.accumulate(start + dur)
    idle = start[1:] - end[:-1]
    out: list[tuple[int, float]] = []
    last_heavy = -1
    for i in range(len(start) - 1):
        if heavy[i]:
            last_heavy = i
        if idle[i] >= MIN_GAP_US and last_heavy >= 0:
            out.append((last_heavy, float(idle[i])))
    return out


def place_async_gaps(ops: pd.DataFrame) -> AsyncGaps:
    """See the module doc."""
    if not is_async_cpu(ops):
        return AsyncGaps(ops, 0.0, 0)
    f = ops.loc[(ops["step"] >= 0) & (ops["device_us"] > 0),
                ["op_id", "step", "start_us", "device_us", "op_class"]].sort_values(["step", "start_us", "op_id"])
    add: dict[int, float] = {}
    n = 0
    for _, g in f.groupby("step", sort=False):
        ids = g["op_id"].to_numpy()
        for row, us in _step_gaps(g["start_us"].to_numpy(dtype=np.float64), g["device_us"].to_numpy(dtype=np.float64),
                                  g["op_class"].isin(HEAVY).to_numpy()):
            add[int(ids[row])] = add.get(int(ids[row]), 0.0) + us
            n += 1
    if not add:
        return AsyncGaps(ops, 0.0, 0)
    out = ops.copy()
    extra = out["op_id"].map(add).fillna(0.0).to_numpy()
    out["device_us"] = out["device_us"].to_numpy(dtype=np.float64) + extra
    return AsyncGaps(out, float(extra.sum()), n)
