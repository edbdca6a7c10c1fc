"""One rank's step split into compute, exposed communication and idle, which add up to the step.

A step's window on a rank runs from the earlier of its ProfilerStep start and its first kernel
to the later of the step's end and its last kernel (a kernel launched in the step may finish
after the host moved on). Inside it, compute is the union of the non-collective kernels;
communication the union of the collective kernels; exposed communication the part of that
union no compute kernel overlaps (the time a rank only waits for or moves data), so
communication = overlapped + exposed; idle what neither covers. compute + exposed + idle =
the step, exactly, by construction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from porter.analysis.busy import union_length


@dataclass(frozen=True)
class StepTime:
    step: int
    start_us: float
    end_us: float
    compute_us: float
    communication_us: float  # collective kernels' union, overlapped or not
    exposed_us: float  # communication no compute overlaps
    idle_us: float

    @property
    def step_us(self) -> float:
        return self.end_us - self.start_us


def _union(k: pd.DataFrame) -> float:
    start = k["start_us"].to_numpy(np.float64)
    return union_length(start, start + k["dur_us"].to_numpy(np.float64))


def step_times(kernels: pd.DataFrame, comm: np.ndarray, spans: Sequence[Sequence[float]]) -> list[StepTime]:
    """Each step's split; comm marks the collective kernel rows; spans: [step, start, end] host
    ranges (trace_meta steps). A trace without steps is one window over all its kernels (step -1)."""
    k = kernels.assign(_comm=comm)
    k = k[k["dur_us"] > 0]
    host = {int(s): (float(a), float(b)) for s, a, b in spans}
    steps = sorted(set(k["step"].unique().tolist()) & set(host)) if host else [-1]
    out = []
    for s in steps:
        g = k if s == -1 else k[k["step"] == s]
        a, b = host.get(s, (np.inf, -np.inf))
        if len(g):
            a, b = min(a, float(g["start_us"].min())), max(b, float((g["start_us"] + g["dur_us"]).max()))
        if not np.isfinite(a) or b <= a:
            continue
        every, compute, communication = _union(g), _union(g[~g["_comm"]]), _union(g[g["_comm"]])
        out.append(StepTime(int(s), a, b, compute, communication, every - compute, (b - a) - every))
    return out


def step_time_dicts(steps: Sequence[StepTime]) -> list[dict[str, Any]]:
    return [{**s.__dict__, "step_us": s.step_us} for s in steps]


def spans_of(trace_meta: Mapping[str, Any]) -> list[list[float]]:
    """The recorded ProfilerStep ranges of a run's trace_meta (empty when the trace has none)."""
    return [list(s) for s in trace_meta.get("steps") or [] if isinstance(s, (list, tuple)) and len(s) == 3]
