"""A multi-rank job's view from its ranks' summaries: time per rank, collectives, the straggler.

At each collective every rank arrives (its collective kernel starts, on the aligned clock,
porter/analysis/clocks.py) and waits for the last: rank r's wait is the last arrival minus
its own. The straggler is the rank whose late arrivals cost the others the most waiting,
summed over the collectives; it falls behind at the collective where the others waited
longest for it, in the op whose device time before that collective exceeds the other ranks'
median by most ("(device idle)" when it was the host that ran late). A collective's transfer
time is from the last arrival to its end; its bus bandwidth is bytes over that time times
NCCL's bus factor (2(n-1)/n for an all-reduce, (n-1)/n for all-gather, reduce-scatter,
all-to-all).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np

from porter.analysis.clocks import ClockAlignment, align_clocks, matched_keys
from porter.analysis.collectives import bus_factor
from porter.analysis.ranksummary import IDLE_OP, LATE_START, RankSummary


@dataclass(frozen=True)
class RankTime:
    rank: int
    steps: int
    step_us: float
    compute_us: float
    communication_us: float
    exposed_us: float
    idle_us: float
    wait_us: float  # time this rank spent waiting at collectives for a later rank
    clock_offset_us: float


@dataclass(frozen=True)
class JobCollective:
    kind: str
    kind_seq: int
    step: int
    bytes: float
    algorithm: str
    protocol: str
    last_rank: int  # the rank the others waited for
    wait_us: float  # mean over the other ranks of their wait for the last one
    max_wait_us: float
    transfer_us: float  # from the last arrival to the (median) end
    bus_gbps: float | None


@dataclass(frozen=True)
class Straggler:
    rank: int
    kind: str  # the collective where the others waited longest for it
    kind_seq: int
    op: str  # where it fell behind before that collective
    op_excess_us: float  # its time in that op over the other ranks' median
    wait_us: float  # the others' mean wait for it at that collective
    waits_us: dict[int, float]  # each other rank's wait there
    caused_us: float  # the others' mean wait for it, summed over every collective it was last at


@dataclass(frozen=True)
class JobView:
    world_size: int
    ranks: tuple[RankTime, ...]
    collectives: tuple[JobCollective, ...]
    straggler: Straggler | None
    clock: ClockAlignment
    findings: tuple[str, ...] = field(default=())

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["straggler"] = asdict(self.straggler) if self.straggler else None
        return d


def _arrivals(summaries: Sequence[RankSummary], clock: ClockAlignment, key: tuple[str, int]) -> dict[int, tuple]:
    """rank -> (aligned start, aligned end, the collective) of one matched collective."""
    out = {}
    for s in summaries:
        c = next(c for c in s.collectives if (c.kind, c.kind_seq) == key)
        out[s.rank] = (clock.aligned(s.rank, c.start_us), clock.aligned(s.rank, c.end_us), c)
    return out


def _behind(summaries: Sequence[RankSummary], clock: ClockAlignment, rank: int,
            key: tuple[str, int]) -> tuple[str, float]:
    """The op (or device idle, or a late start) where `rank` spent most over the others before
    collective `key`."""
    per = {}
    for s in summaries:
        c = next(c for c in s.collectives if (c.kind, c.kind_seq) == key)
        per[s.rank] = {**dict(c.before), LATE_START: clock.aligned(s.rank, c.stretch_start_us)}
    starts = [v[LATE_START] for r, v in per.items() if r != rank]
    for r, v in per.items():  # a start counts by how much later than the others' median it was
        v[LATE_START] -= float(np.median(starts))
    mine, others = per[rank], [v for r, v in per.items() if r != rank]
    names = set(mine) | {n for o in others for n in o}
    excess = {n: mine.get(n, 0.0) - float(np.median([o.get(n, 0.0) for o in others])) for n in names}
    if not excess:
        return IDLE_OP, 0.0
    op = max(sorted(excess), key=lambda n: excess[n])
    return op, excess[op]


def job_view(summaries: Sequence[RankSummary]) -> JobView:
    """The job's view; summaries of every rank, any order."""
    summaries = sorted(summaries, key=lambda s: s.rank)
    clock = align_clocks(summaries)
    keys = matched_keys(summaries)
    waits = {s.rank: 0.0 for s in summaries}
    caused = {s.rank: 0.0 for s in summaries}
    colls, worst = [], {}
    n = len(summaries)
    for key in keys:
        arr = _arrivals(summaries, clock, key)
        last = max(sorted(arr), key=lambda r: arr[r][0])
        w = {r: arr[last][0] - a[0] for r, a in arr.items() if r != last}
        for r, v in w.items():
            waits[r] += v
        mean_wait = float(np.mean(list(w.values()))) if w else 0.0
        caused[last] += mean_wait
        if mean_wait > worst.get(last, (-1.0, None, None))[0]:
            worst[last] = (mean_wait, key, w)
        ref = arr[summaries[0].rank][2]
        transfer = float(np.median([a[1] for a in arr.values()])) - arr[last][0]
        nbytes = float(np.nanmedian([a[2].bytes for a in arr.values()])) if any(
            np.isfinite(a[2].bytes) for a in arr.values()) else float("nan")
        bus = (nbytes / (transfer * 1e-6) * bus_factor(key[0], n) / 1e9
               if transfer > 0 and np.isfinite(nbytes) else None)
        colls.append(JobCollective(key[0], key[1], ref.step, nbytes, ref.algorithm, ref.protocol, last, mean_wait,
                                   max(w.values(), default=0.0), max(transfer, 0.0), bus))
    ranks = tuple(RankTime(s.rank, len(s.steps), *(float(sum(getattr(t, f) for t in s.steps)) for f in (
        "step_us", "compute_us", "communication_us", "exposed_us", "idle_us")), waits[s.rank],
        clock.offsets_us[s.rank]) for s in summaries)
    straggler = None
    if keys and max(caused.values()) > 0:
        s = max(sorted(caused), key=lambda r: caused[r])
        wait, key, w = worst[s]
        op, excess = _behind(summaries, clock, s, key)
        straggler = Straggler(s, key[0], key[1], op, excess, wait, w, caused[s])
    return JobView(n, ranks, tuple(colls), straggler, clock, tuple(_findings(summaries, clock, keys, ranks)))


def _findings(summaries: Sequence[RankSummary], clock: ClockAlignment, keys: list, ranks: Sequence[RankTime]) -> list[str]:
    out = []
    counts = {s.rank: len(s.collectives) for s in summaries}
    if len(set(counts.values())) > 1:
        out.append(f"ranks recorded different numbers of collectives ({min(counts.values())}-{max(counts.values())}): "
                   f"the {len(keys)} every rank recorded (matched by kind and order) are compared")
    if not keys:
        out.append("no collective common to every rank: clocks are not aligned and no straggler can be named")
    step = float(np.median([r.step_us / max(r.steps, 1) for r in ranks])) if ranks else 0.0
    far = {r: v for r, v in clock.raw_skew_us.items() if step > 0 and v > step}
    if far:
        r, v = max(far.items(), key=lambda kv: kv[1])
        out.append(f"{len(far)} ranks' clocks were more than a step off rank {clock.reference}'s "
                   f"(rank {r}: {v / 1e3:.1f} ms): aligned on collective ends")
    if keys and step > 0 and clock.residual_us > 0.05 * step:
        out.append(f"collective ends still differ by {clock.residual_us:.0f} us after alignment "
                   f"({clock.residual_us / step:.0%} of a step): clocks drift, or the ranks' collectives do not match")
    return out
