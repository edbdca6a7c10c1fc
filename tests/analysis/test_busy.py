"""Busy time (union of device intervals) against an independent computation from the raw traces."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pandas as pd
import pytest

from conftest import corpus_files
from porter.analysis.busy import busy_block, run_busy, runs_busy, side_busy, union_length
from porter.bundles.bundle import run_of
from porter.bundles.ingest import open_any
from porter.core.run import Run

DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "mtia_ccp_events")
NOT_WORK = ("event_wait", "event_record")  # MTIA queue sync markers: no device work


def _run(kernels: pd.DataFrame, role: str = "source") -> Run:
    return Run(ops=pd.DataFrame(), kernels=kernels, label=role, role=role)


def test_union_of_hand_made_intervals():
    start = np.array([0.0, 5.0, 2.0, 20.0, 21.0])
    end = np.array([4.0, 10.0, 6.0, 22.0, 21.5])
    assert union_length(start, end) == pytest.approx(10.0 + 2.0)  # [0,10) and [20,22)
    k = pd.DataFrame({"start_us": start, "dur_us": end - start, "device_id": 0, "step": [0, 0, 0, 1, 1]})
    b = side_busy(k)
    assert b["busy_us"] == pytest.approx(12.0) and b["kernel_us"] == pytest.approx(15.5)
    assert b["overlap_us"] == pytest.approx(3.5) and b["per_step_busy_us"] == pytest.approx([10.0, 2.0])
    both = busy_block(_run(k), _run(k.assign(dur_us=k["dur_us"] * 2), "target"))
    assert both["streams_overlap"] and both["kernel_sum_ratio"] == pytest.approx(2.0)


def _reference_busy_us(path) -> float:
    """Sort-and-merge over the raw JSON's device events, per device (pid), in plain Python."""
    events = json.load(gzip.open(path))
    events = events["traceEvents"] if isinstance(events, dict) else events
    per_device: dict = {}
    for e in events:
        if (e.get("ph") == "X" and str(e.get("cat")).lower() in DEVICE_CATS and e.get("dur", 0) > 0
                and e.get("name") not in NOT_WORK):
            per_device.setdefault(e["pid"], []).append((float(e["ts"]), float(e["ts"]) + float(e["dur"])))
    total = 0.0
    for spans in per_device.values():
        spans.sort()
        cur_s, cur_e = spans[0]
        for s, e in spans[1:]:
            if s > cur_e:
                total += cur_e - cur_s
                cur_s, cur_e = s, e
            else:
                cur_e = max(cur_e, e)
        total += cur_e - cur_s
    return total


@pytest.mark.corpus
@pytest.mark.parametrize("trace", [p for p in corpus_files("kineto", "*.json.gz") if "cpu_only" not in p.name],
                         ids=lambda p: p.name)
def test_busy_time_equals_an_independent_union(trace):
    want = _reference_busy_us(trace)
    got = side_busy(open_any(trace).kernels)
    assert want > 0
    assert got["busy_us"] == pytest.approx(want, rel=1e-3)
    assert got["busy_us"] <= got["kernel_us"] * (1 + 1e-12)
    if trace.name.startswith("mtia"):  # MTIA's queues overlap: the kernel sum overstates busy time
        assert got["overlap_share"] > 0.05


def test_cpu_only_self_time_rows_do_not_overlap(tmp_path):
    """A CPU-only trace's rows are self times placed at nested ops' starts: a parent's row
    covers its child's start, which a union would count as stream overlap. Busy = their sum."""
    ev = [{"ph": "X", "cat": "cpu_op", "name": n, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": {}}
          for n, ts, dur in (("aten::linear", 0, 100), ("aten::addmm", 10, 80), ("aten::relu", 200, 30))]
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps({"traceEvents": ev}))
    got = side_busy(open_any(path).kernels)
    # self times: linear 100-80, addmm 80, relu 30
    assert got["kernel_us"] == pytest.approx(130.0)
    assert got["busy_us"] == pytest.approx(130.0) and got["overlap_us"] == 0.0
    block = busy_block(run_of(open_any(path), "source"), run_of(open_any(path), "target"))
    assert block["streams_overlap"] is False


def test_end_to_end_ratio_counts_busy_time_where_streams_overlap():
    """Two streams overlapping on the source, serial on the target: the kernel sum calls the
    pair even, busy time says the target takes longer; end_to_end keeps both."""
    from porter.analysis.attribute import EndToEnd
    from porter.core.samples import Samples

    src = pd.DataFrame({"start_us": [0.0, 0.0, 100.0, 100.0], "dur_us": [50.0, 50.0, 50.0, 50.0],
                        "device_id": 0, "stream": [7, 8, 7, 8], "step": [0, 0, 1, 1]})
    tgt = src.assign(start_us=[0.0, 50.0, 100.0, 150.0])
    block = busy_block(_run(src), _run(tgt, "target"))
    assert block["streams_overlap"] and block["source"]["per_step_busy_us"] == [50.0, 50.0]
    sums = Samples((100.0, 100.0))  # charged (summed) time per step, both sides
    e2e = EndToEnd(sums, sums, 0.0, 0.0, 200.0, 200.0).with_busy(block)
    assert e2e.uses_busy and e2e.ratio == pytest.approx(2.0) and e2e.kernel_sum_ratio == pytest.approx(1.0)
    d = e2e.to_dict()
    assert d["ratio_time"] == "busy" and d["source_per_step_busy_us"]["median"] == pytest.approx(50.0)
    quiet = EndToEnd(sums, sums, 0.0, 0.0, 200.0, 200.0).with_busy(busy_block(_run(tgt), _run(tgt, "target")))
    assert not quiet.uses_busy and quiet.to_dict()["ratio_time"] == "kernel_sum" and quiet.ratio == 1.0


@pytest.mark.corpus
def test_a_jobs_ranks_are_runs_of_their_own():
    """Two ranks of a real 8-rank DLRM job read into one table: a device is (rank, device_id),
    so the job's busy time is the ranks' sum, and per_rank() gives back each rank's own run
    (its busy time as read alone)."""
    paths = [p for p in corpus_files("multirank", "v100_dlrm_8rank/rank-*.json.gz")][:2]
    if len(paths) < 2:
        pytest.skip("the corpus lacks multirank/v100_dlrm_8rank")
    bundles = [open_any(p) for p in paths]
    ranks = [run_of(b, "source").rank for b in bundles]
    assert ranks == [0, 1]  # from the traces' distributedInfo (world_size 8)
    assert all(set(b.ops["rank"]) == {r} and set(b.kernels["rank"]) == {r} for b, r in zip(bundles, ranks))
    job = Run(ops=pd.concat([b.ops for b in bundles], ignore_index=True),
              kernels=pd.concat([b.kernels for b in bundles], ignore_index=True), label="dlrm", role="source")
    alone = [side_busy(b.kernels)["busy_us"] for b in bundles]
    assert job.ranks() == [0, 1]
    assert [r.rank for r in job.per_rank()] == [0, 1]
    assert [b["busy_us"] for b in runs_busy(job.per_rank())] == pytest.approx(alone)
    together = run_busy(job)
    assert together["busy_us"] == pytest.approx(sum(alone))  # not the union of two ranks' device 0
    assert [(d["rank"], d["device_id"]) for d in together["devices"]] == [(0, 0), (1, 1)]  # each rank its GPU
