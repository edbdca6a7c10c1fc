"""porter.core.run: which rank a trace holds, and a job's tables split into one Run per rank."""

from __future__ import annotations

import pandas as pd
import pytest

from porter.core.run import Run, job_rank


@pytest.mark.parametrize("meta,rank", [
    ({"rank": 3, "world_size": 8}, 3),
    ({"rank": 0, "world_size": 2}, 0),
    ({"rank": 0, "world_size": 1}, None),  # a one-process job is a single-rank run
    ({"rank": 9, "world_size": 8}, None),  # out of range: not trusted
    ({"rank": "x", "world_size": 8}, None),
    ({}, None),
])
def test_job_rank_reads_only_a_rank_of_several(meta, rank):
    assert job_rank(meta) == rank


def test_per_rank_splits_the_tables_and_labels_each_rank():
    ops = pd.DataFrame({"op_id": [0, 1, 2], "rank": [1, 0, 1]})
    kernels = pd.DataFrame({"op_id": [0, 1, 2, 2], "rank": [1, 0, 1, 1], "dur_us": [1.0, 2.0, 3.0, 4.0]})
    job = Run(ops=ops, kernels=kernels, label="dlrm", role="target")
    parts = job.per_rank()
    assert [(p.rank, p.label, p.role) for p in parts] == [(0, "dlrm rank 0", "target"), (1, "dlrm rank 1", "target")]
    assert [float(p.kernels["dur_us"].sum()) for p in parts] == [2.0, 8.0]
    single = Run(ops=ops.assign(rank=-1), kernels=kernels.assign(rank=-1), label="one", role="source")
    assert single.ranks() == [] and single.per_rank() == [single]
