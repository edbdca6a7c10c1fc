"""The corpus's TPU v6e x4 XPlane read as xprof reads it: per HLO op, the names, occurrences and
self times of xprof's own hlo_stats tool (run here on a copy: it writes caches beside its input)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import hlo_stats
from profilers.detect import read_trace

TPU = "xplane/tpu_v6e_x4_inference.xplane.pb"


def test_tpu_ops_equal_xprof_hlo_stats(corpus: Path, tmp_path: Path) -> None:
    path = corpus / TPU
    got = read_trace(path)
    ops, k = got.ops, got.kernels
    assert got.meta.device_type == "tpu" and got.meta.device_name == "TPU v6 Lite"
    rows = hlo_stats(path, tmp_path)
    mine = ops.groupby("name").agg(us=("device_us", "sum"), n=("device_us", "size"))
    assert set(mine.index) == {r["hlo_op_name"] for r in rows}  # 'copy-done.2', not its HLO text
    for r in rows:
        assert mine.loc[r["hlo_op_name"], "n"] == r["occurrences"], r["hlo_op_name"]
        assert mine.loc[r["hlo_op_name"], "us"] == pytest.approx(r["total_self_time"], rel=5e-3), r["hlo_op_name"]
    assert ops.device_us.sum() == pytest.approx(sum(r["total_self_time"] for r in rows), rel=1e-6)
    # four chips, one device each, holding xprof's 6,013 op executions between them
    per_chip = k.groupby("device_id").size()
    assert per_chip.index.tolist() == [0, 1, 2, 3] and (per_chip >= 1503).all()
    assert per_chip.sum() == sum(r["occurrences"] for r in rows) == 6013
    assert set(ops.loc[ops.name.str.startswith(("copy-start", "copy-done")), "op_class"]) == {"copy"}
    # each op's class follows xprof's HLO category for it (broadcast_add_fusion is a loop fusion: an add, not a copy)
    expected = {"loop fusion": "elementwise", "copy-start": "copy", "copy-done": "copy", "all-reduce": "collective",
                "broadcast": "copy"}
    assert {r["category"] for r in rows} == set(expected)
    for r in rows:
        assert set(ops.loc[ops.name == r["hlo_op_name"], "op_class"]) == {expected[r["category"]]}, r["hlo_op_name"]
    assert set(ops.loc[ops.name == "all-reduce", "op_class"]) == {"collective"}
