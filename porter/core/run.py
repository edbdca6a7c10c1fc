"""One run the pipeline compares: its tables and what it is (which side, which rank, which stack).

The pipeline passes Runs, not bare tables, so that an analysis of one run (its views, busy
time, totals) is written once over ``Sequence[Run]``: a pair is two Runs, a multi-rank job one
Run per rank (``per_rank``), an N-stack comparison N Runs. Bundles stay the storage
(porter.bundles: path, manifest, tables on disk); ``porter.bundles.bundle.run_of`` makes the
Run of a bundle. Kept here, below every layer, so that analysis/ can take Runs without
importing storage.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Mapping

from porter.core.schema import NO_ID

if TYPE_CHECKING:
    import pandas as pd

SINGLE_RANK = NO_ID  # the tables' rank of a run that is not one rank of several


@dataclass(frozen=True)
class Run:
    ops: "pd.DataFrame"
    kernels: "pd.DataFrame"
    label: str  # the bundle's label: what the report calls this run
    role: str  # "source" or "target" in a pair; the label in an N-run comparison
    rank: int | None = None  # the job's rank this run holds alone; None: single-rank, or every rank at once
    stack: str | None = None  # the stack a live capture ran (core.stacks name); None for a recorded trace
    manifest: Mapping[str, Any] = field(default_factory=dict, repr=False)

    def ranks(self) -> list[int]:
        """The ranks of a multi-rank job present in the tables ([] for a single-rank run)."""
        if "rank" not in self.ops.columns:
            return []
        found = set(self.ops["rank"].unique().tolist())
        if "rank" in self.kernels.columns:
            found |= set(self.kernels["rank"].unique().tolist())
        return sorted(int(r) for r in found if r != SINGLE_RANK)

    def per_rank(self) -> list[Run]:
        """One Run per rank when the tables hold several, else this Run: the per-run analyses
        then see each rank of a job as a run of its own."""
        ranks = self.ranks()
        if len(ranks) < 2:
            return [self]
        return [replace(self, ops=self.ops[self.ops["rank"] == r].reset_index(drop=True),
                        kernels=self.kernels[self.kernels["rank"] == r].reset_index(drop=True),
                        label=f"{self.label} rank {r}", rank=r) for r in ranks]


def job_rank(trace_meta: Mapping[str, Any]) -> int | None:
    """The rank a trace file holds when it is one rank of a job of several (Kineto's
    distributedInfo rank and world_size), else None."""
    try:
        rank, world = int(trace_meta.get("rank")), int(trace_meta.get("world_size", 0))
    except (TypeError, ValueError):
        return None
    return rank if world > 1 and 0 <= rank < world else None
