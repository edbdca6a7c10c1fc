"""The op table per (framework op, input shapes, dtypes) and the per-class gross split, on
the Qwen H100 -> MI300X corpus pair (real traces recorded with shapes)."""

from __future__ import annotations

import json
import math

import pytest
from _diagnoses import qwen_trace_diagnosis

from porter.analysis.opshape import compact


@pytest.fixture(scope="module")
def qwen_json(tmp_path_factory):
    return json.loads((qwen_trace_diagnosis(tmp_path_factory) / "diagnosis.json").read_text())


def test_compact_puts_recorded_shapes_on_one_line():
    assert compact('[\n  [\n    8944,\n    1024\n  ],\n  []\n]') == "[[8944,1024],[]]"
    assert compact("") == ""
    assert compact("not json  here") == "not json here"


def test_op_shape_rows_sum_to_each_side_and_aggregate_instances(qwen_json):
    rows = qwen_json["by_op_shape"]
    e = qwen_json["end_to_end"]
    assert math.isclose(sum(r["source_us"] for r in rows), e["source_total_us"], rel_tol=1e-9)
    assert math.isclose(sum(r["target_us"] for r in rows), e["target_total_us"], rel_tol=1e-9)
    keys = [(r["framework_op"], r["input_shapes"], r["dtypes"]) for r in rows]
    assert len(keys) == len(set(keys))
    assert [abs(r["delta_us"]) for r in rows] == sorted((abs(r["delta_us"]) for r in rows), reverse=True)
    # the heaviest GEMM shape: one row for its 48 calls per side (24 layers x 2 steps' worth), not 48 rows
    mm = next(r for r in rows if r["framework_op"] == "aten::mm" and r["input_shapes"] == "[[8944,1024],[1024,2816]]")
    assert mm["source_count"] == mm["target_count"] == 48
    assert math.isclose(mm["target_mean_us"] * 48, mm["target_us"], rel_tol=1e-9)
    assert mm["op_class"] == "matmul" and mm["module_kinds"][0].endswith("Qwen2MLP/Linear")
    assert 0 < mm["target_efficiency"] < 1  # a roofline share exists for a GEMM with recorded shapes
    assert all(len(r["module_kinds"]) <= 3 for r in rows)


def test_a_slow_shape_inside_a_class_that_nets_to_a_win(qwen_json):
    """The timesformer-like case: elementwise is faster on the target overall, yet the
    RMSNorm's rsqrt on [16,559,1] is 2.7x slower; gross loss + gross win = net per class."""
    cls = {r["key"]: r for r in qwen_json["by_class"]}
    for r in cls.values():
        assert math.isclose(r["gross_loss_us"] + r["gross_win_us"], r["delta_us"], rel_tol=1e-9, abs_tol=1e-6)
    assert cls["elementwise"]["delta_us"] < 0
    slow = [r for r in qwen_json["by_op_shape"] if r["op_class"] == "elementwise" and (r["ratio"] or 0) > 2.5]
    assert any(r["framework_op"] == "aten::rsqrt" and r["input_shapes"] == "[[16,559,1]]" for r in slow)
    assert cls["elementwise"]["gross_loss_us"] >= sum(r["delta_us"] for r in slow)


@pytest.mark.slow
def test_a_cross_framework_pair_puts_each_linear_and_its_dot_general_in_one_row(tmp_path_factory):
    """The demo (transformer, cpu -> xla): eager's aten::addmm and the dot_general XLA ran for it
    are one row keyed by the source's op (their groups are paired by module and call), its
    ratio finite; a row on one side only says so and has no ratio (it read 0.00x)."""
    from _diagnoses import live_transformer_diagnosis

    doc = json.loads((live_transformer_diagnosis(tmp_path_factory) / "diagnosis.json").read_text())
    rows = doc["by_op_shape"]
    addmm = [r for r in rows if r["framework_op"] == "aten::addmm"]
    assert addmm and all(r["target_count"] > 0 and "dot_general" in r["target_ops"] for r in addmm), addmm
    assert all(0.1 < r["ratio"] < 10 for r in addmm)
    # no target dot_general is left beside the GEMMs it ran for (every linear's group pairs)
    left = sum(r["target_us"] for r in rows if r["framework_op"] == "dot_general")
    assert left < 0.5 * sum(r["target_us"] for r in addmm), left
    for r in rows:
        one = "source" if r["target_count"] == 0 else "target" if r["source_count"] == 0 else ""
        assert r["only_on"] == one and (r["ratio"] is None) == bool(one), r
    # keys move, time does not: the rows still sum to each side's total
    e = doc["end_to_end"]
    assert math.isclose(sum(r["source_us"] for r in rows), e["source_total_us"], rel_tol=1e-9)
    assert math.isclose(sum(r["target_us"] for r in rows), e["target_total_us"], rel_tol=1e-9)
    md = (live_transformer_diagnosis(tmp_path_factory) / "report.md").read_text()
    assert "(target: dot_general" in md and "only on source" in md and "| 0.00x |" not in md
