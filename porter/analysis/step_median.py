"""Each op call's time as its median over the profiled steps (live pairs only).

A live capture runs the same program every profiled step, so the n-th call of op X in
module M is the same work in every step: its identity is (module, op, call index within
the step). On a loaded machine one step can be preempted inside a single op (an eager
layer norm of 20 us took 1.3 ms in one of three steps), and summed over steps that one
call makes its module look 20x slower than on the other stack. Here each call that ran
in every profiled step is charged the median of its times over those steps; a call that
did not (the program differed between steps) keeps its own time. The totals are then
steps x the median step, not the raw sum; ``StepMedian.raw_total`` keeps the raw sum.
With fewer than three steps the median is the mean, which is said by ``robust``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from porter.analysis.optime import OpTimes


@dataclass(frozen=True)
class StepMedian:
    times: OpTimes  # each op call's median over the steps it repeats in
    raw_total: float  # the sum before (what the profiler measured)
    calls: int  # op calls (per step) that repeat in every step and so got a median
    steps: int
    robust: bool  # three or more steps: one outlier step cannot move a median


def call_index(ops: pd.DataFrame) -> pd.Series:
    """op_id -> how many calls of the same (module, name) came before it in its step (time order)."""
    f = ops[["op_id", "step", "module", "name", "start_us"]].sort_values(["step", "start_us", "op_id"], kind="stable")
    k = f.groupby(["step", "module", "name"], sort=False).cumcount()
    return pd.Series(k.to_numpy(), index=f["op_id"].to_numpy())


def step_median(ops: pd.DataFrame, times: OpTimes) -> StepMedian:
    """See the module doc. Ops outside every step (step < 0) keep their own time."""
    in_step = ops["step"].to_numpy() >= 0
    steps = int(pd.unique(ops.loc[in_step, "step"]).size)
    if steps < 2:
        return StepMedian(times, times.total, 0, steps, False)
    f = ops.loc[in_step, ["op_id", "step", "module", "name", "start_us"]]
    k = call_index(f)
    f = f.assign(k=k.reindex(f["op_id"].to_numpy()).to_numpy(),
                 t=times.values.reindex(f["op_id"].to_numpy()).fillna(0.0).to_numpy())
    by = f.groupby(["module", "name", "k"], sort=False)["t"]
    median, count = by.transform("median").to_numpy(), by.transform("size").to_numpy()
    every = count == steps
    values = times.values.copy()
    ids = f["op_id"].to_numpy()[every]
    values.loc[ids] = median[every]
    calls = int(np.count_nonzero(every)) // steps
    return StepMedian(OpTimes(values, times.basis), times.total, calls, steps, steps >= 3)
