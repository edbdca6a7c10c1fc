"""Ranks' clocks put on one time axis by the collectives they share.

Each rank's trace has its own clock: times in porter's tables count from that trace's first
event, and the raw clock of that origin (trace_meta clock_origin_us) is the host's, which
differs between hosts by anything from microseconds to seconds (NTP, boot time). A collective
ends at nearly the same instant on every rank taking part (no rank can leave before the last
one's data arrived), so ends are the anchor: rank r's offset against the reference rank (the
lowest) is the median, over the collectives both recorded (matched by kind and order), of
(reference's raw end - r's raw end). The median ignores a few collectives that end apart
(a rank's late kernel teardown). The residual (the largest |end difference| left after
alignment, per collective, median over collectives) says how well the anchor held.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from porter.analysis.ranksummary import RankSummary


@dataclass(frozen=True)
class ClockAlignment:
    reference: int  # the rank whose clock the job's times are on
    offsets_us: dict[int, float]  # added to a rank's raw clock to read the reference's
    raw_skew_us: dict[int, float]  # |offset|: how far each rank's raw clock was off
    residual_us: float  # median over collectives of the spread of aligned ends
    anchors: int  # collectives every rank recorded
    origins_us: dict[int, float]  # each rank's raw clock at its time 0

    def aligned(self, rank: int, t_us: float) -> float:
        """A time of one rank's table on the reference rank's relative clock."""
        return t_us + self.origins_us[rank] + self.offsets_us[rank] - self.origins_us[self.reference]


def matched_keys(summaries: Sequence[RankSummary]) -> list[tuple[str, int]]:
    """(kind, kind_seq) of the collectives every rank recorded, in the reference's order."""
    sets = [{(c.kind, c.kind_seq) for c in s.collectives} for s in summaries]
    common = set.intersection(*sets) if sets else set()
    return [(c.kind, c.kind_seq) for c in summaries[0].collectives if (c.kind, c.kind_seq) in common] if summaries else []


def align_clocks(summaries: Sequence[RankSummary]) -> ClockAlignment:
    """Offsets that put every rank on the lowest rank's clock, anchored on collective ends;
    without a shared collective the raw clocks are kept (offset 0, anchors 0)."""
    ref = summaries[0]
    keys = matched_keys(summaries)
    end = {s.rank: {(c.kind, c.kind_seq): s.clock_origin_us + c.end_us for c in s.collectives} for s in summaries}
    offsets = {}
    for s in summaries:
        d = [end[ref.rank][k] - end[s.rank][k] for k in keys]
        offsets[s.rank] = float(np.median(d)) if d else 0.0
    spread = [float(np.ptp([end[s.rank][k] + offsets[s.rank] for s in summaries])) for k in keys]
    return ClockAlignment(reference=ref.rank, offsets_us=offsets, raw_skew_us={r: abs(v) for r, v in offsets.items()},
                          residual_us=float(np.median(spread)) if spread else 0.0, anchors=len(keys),
                          origins_us={s.rank: s.clock_origin_us for s in summaries})
