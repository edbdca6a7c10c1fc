"""What one rank of a job contributes to the job's view: about a kilobyte per collective, never its trace.

Each rank is read and summarised on its own (in a worker of the engine); only this summary
travels to the job's analysis (porter/analysis/jobview.py): the rank's step split
(rankstep.py), its collectives in order with their bytes, and for the stretch of work before
each collective the device time per op and the idle time, which is where a straggler is seen
to fall behind. Names are interned, so a pickled summary holds each op and kernel name once
however many collectives repeat it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from porter.analysis.busy import union_length
from porter.analysis.collectives import collective_kernels, is_collective
from porter.analysis.rankstep import StepTime, spans_of, step_times
from porter.core.run import Run

TOP_OPS = 16  # ops kept per stretch: the straggler's op is one of the costliest where it falls behind
IDLE_OP = "(device idle)"  # a stretch's time with no kernel: a host-bound delay
LATE_START = "(started late: the previous collective or step)"  # the stretch itself began after the others'


@dataclass(frozen=True)
class RankCollective:
    seq: int  # order among this rank's collectives
    kind: str
    kind_seq: int  # order among this rank's collectives of this kind: the key ranks are matched by
    step: int
    start_us: float  # on this rank's own clock (relative to clock_origin_us)
    end_us: float
    bytes: float
    algorithm: str
    protocol: str
    name: str
    before: tuple[tuple[str, float], ...]  # (op, device us) in the stretch since the previous collective, largest first
    stretch_start_us: float = 0.0  # where that stretch began: the previous collective's end, or the first step's start


@dataclass(frozen=True)
class RankSummary:
    rank: int
    label: str
    world_size: int
    clock_origin_us: float  # the raw clock of the rank's time 0 (0 when the trace does not say)
    steps: tuple[StepTime, ...]
    collectives: tuple[RankCollective, ...]
    device: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "label": self.label, "world_size": self.world_size, "device": self.device,
                "clock_origin_us": self.clock_origin_us, "steps": [s.__dict__ for s in self.steps],
                "collectives": [{**c.__dict__, "before": [list(b) for b in c.before]} for c in self.collectives]}


def _stretch(k: pd.DataFrame, names: np.ndarray, a: float, b: float) -> tuple[tuple[str, float], ...]:
    """Device time per op of the kernels inside [a, b), clipped to it, and the idle time."""
    if b <= a:
        return ()
    s, e = k["start_us"].to_numpy(np.float64), (k["start_us"] + k["dur_us"]).to_numpy(np.float64)
    inside = (s < b) & (e > a)
    cs, ce = np.maximum(s[inside], a), np.minimum(e[inside], b)
    per = pd.Series(ce - cs).groupby(names[inside]).sum().sort_values(ascending=False, kind="stable")
    rows = [(sys.intern(str(n)), float(v)) for n, v in per.head(TOP_OPS).items() if v > 0]
    rows.append((IDLE_OP, (b - a) - union_length(cs, ce)))
    return tuple(rows)


def rank_summary(run: Run, world_size: int) -> RankSummary:
    """The summary of one rank's Run (its manifest's trace_meta gives steps and clock origin)."""
    meta = run.manifest.get("trace_meta") or {}
    ops, kernels = run.ops, run.kernels
    comm = is_collective(kernels, ops)
    steps = step_times(kernels, comm, spans_of(meta))
    coll = collective_kernels(kernels, ops)
    names = ops.set_index("op_id")["name"].reindex(kernels["op_id"].to_numpy()).fillna("").to_numpy(dtype=object)
    keep = ~comm & (kernels["dur_us"] > 0).to_numpy()
    compute, compute_names = kernels[keep], names[keep]
    first = min((s.start_us for s in steps), default=float(kernels["start_us"].min()) if len(kernels) else 0.0)
    out, seen, prev_end = [], {}, first
    for i, c in enumerate(coll.itertuples(index=False)):
        kind_seq = seen.get(c.kind, 0)
        seen[c.kind] = kind_seq + 1
        out.append(RankCollective(i, c.kind, kind_seq, int(c.step), float(c.start_us), float(c.end_us), float(c.bytes),
                                  sys.intern(str(c.algorithm)), sys.intern(str(c.protocol)), sys.intern(str(c.name)),
                                  _stretch(compute, compute_names, prev_end, float(c.start_us)), prev_end))
        prev_end = max(prev_end, float(c.end_us))
    device = str((run.manifest.get("device") or {}).get("name") or "")
    return RankSummary(rank=int(run.rank if run.rank is not None else 0), label=run.label, world_size=world_size,
                       clock_origin_us=float(meta.get("clock_origin_us") or 0.0), steps=tuple(steps),
                       collectives=tuple(out), device=device)
