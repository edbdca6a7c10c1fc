"""Busy time (union of device intervals) against an independent computation from the raw traces."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pandas as pd
import pytest

from conftest import corpus_files
from porter.analysis.busy import busy_block, side_busy, union_length
from porter.bundles.ingest import open_any

DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "mtia_ccp_events")
NOT_WORK = ("event_wait", "event_record")  # MTIA queue sync markers: no device work


def test_union_of_hand_made_intervals():
    start = np.array([0.0, 5.0, 2.0, 20.0, 21.0])
    end = np.array([4.0, 10.0, 6.0, 22.0, 21.5])
    assert union_length(start, end) == pytest.approx(10.0 + 2.0)  # [0,10) and [20,22)
    k = pd.DataFrame({"start_us": start, "dur_us": end - start, "device_id": 0, "step": [0, 0, 0, 1, 1]})
    b = side_busy(k)
    assert b["busy_us"] == pytest.approx(12.0) and b["kernel_us"] == pytest.approx(15.5)
    assert b["overlap_us"] == pytest.approx(3.5) and b["per_step_busy_us"] == pytest.approx([10.0, 2.0])
    both = busy_block(k, k.assign(dur_us=k["dur_us"] * 2))
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
    block = busy_block(open_any(path).kernels, open_any(path).kernels)
    assert block["streams_overlap"] is False


def test_end_to_end_ratio_counts_busy_time_where_streams_overlap():
    """Two streams overlapping on the source, serial on the target: the kernel sum calls the
    pair even, busy time says the target takes longer; end_to_end keeps both."""
    from porter.analysis.attribute import EndToEnd, Spread

    src = pd.DataFrame({"start_us": [0.0, 0.0, 100.0, 100.0], "dur_us": [50.0, 50.0, 50.0, 50.0],
                        "device_id": 0, "stream": [7, 8, 7, 8], "step": [0, 0, 1, 1]})
    tgt = src.assign(start_us=[0.0, 50.0, 100.0, 150.0])
    block = busy_block(src, tgt)
    assert block["streams_overlap"] and block["source"]["per_step_busy_us"] == [50.0, 50.0]
    sums = Spread((100.0, 100.0))  # charged (summed) time per step, both sides
    e2e = EndToEnd(sums, sums, 0.0, 0.0, 200.0, 200.0).with_busy(block)
    assert e2e.uses_busy and e2e.ratio == pytest.approx(2.0) and e2e.kernel_sum_ratio == pytest.approx(1.0)
    d = e2e.to_dict()
    assert d["ratio_time"] == "busy" and d["source_per_step_busy_us"]["median"] == pytest.approx(50.0)
    quiet = EndToEnd(sums, sums, 0.0, 0.0, 200.0, 200.0).with_busy(busy_block(tgt, tgt))
    assert not quiet.uses_busy and quiet.to_dict()["ratio_time"] == "kernel_sum" and quiet.ratio == 1.0
