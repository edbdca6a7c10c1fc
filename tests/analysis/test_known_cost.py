"""Unknown cost is unknown: no roofline, nothing recoverable, lower confidence; and the cost
model knows >= 95% of device time on every corpus pair."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from conftest import corpus_dir
from porter.analysis.fixrank import rank_fixes
from porter.analysis.opcost import op_costs
from porter.pipeline.diagnose import analyse
from porter.bundles.ingest import open_any

PAIRS = {
    "bert-small": ("h100_gaunernst_bert-small-uncased", "mi300x_gaunernst_bert-small-uncased"),
    "falconsai": ("h100_Falconsai_nsfw_image_detection", "mi300x_Falconsai_nsfw_image_detection"),
    "qwen": ("h100_Qwen_Qwen1.5-0.5B-Chat", "mi300x_Qwen_Qwen1.5-0.5B-Chat"),
}


def corpus_pair(name: str):
    src, tgt = (corpus_dir() / "kineto" / f"{n}.json.gz" for n in PAIRS[name])
    if not src.is_file():
        pytest.skip(f"trace corpus not found at {corpus_dir()}")
    return open_any(src), open_any(tgt)


@pytest.mark.corpus
@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_cost_is_known_for_95_percent_of_time_and_unknown_claims_nothing(pair):
    d = analyse(*corpus_pair(pair))
    roof = d.extras["roofline"]
    share = roof["totals"]["known_cost_share"]
    assert share["source"] >= 0.95 and share["target"] >= 0.95, share
    table = pd.DataFrame(roof["groups"])
    unknown = table["cost_basis"] == "unknown"
    assert table.loc[unknown, ["roofline_us", "efficiency", "recoverable_us"]].isna().all().all()
    assert not (table.loc[~unknown, "roofline_us"] == 0).any()  # a known cost is never a 0 us roofline
    assert roof["totals"]["recoverable_us"] == pytest.approx(float(table.loc[~unknown, "recoverable_us"].sum()))
    unknown_ids = set(table.loc[unknown, "group_id"].astype(str))
    for fix in d.extras["fixes"]:
        if fix["kind"] == "perf" and unknown_ids & set(map(str, fix["group_ids"])):
            assert fix["confidence"] != "high" and any("no cost model" in e for e in fix["evidence"])


def test_stand_in_kernel_takes_its_recorded_twins_cost():
    """A stand-in op (no shapes) running the same GEMM kernel as a recorded aten::mm, in a like
    time, costs what the aten::mm costs; one whose time is 10x off stays unknown."""
    gemm = "sm90_xmma_gemm_bf16_tn"
    ops = pd.DataFrame({
        "op_id": [0, 1, 2], "parent_id": [-1, -1, -1],
        "framework_op": ["aten::mm", "", ""], "op_class": ["matmul", "matmul", "matmul"],
        "input_shapes": ["[[64, 128], [128, 256]]", "", ""], "dtypes": ['["c10::BFloat16", "c10::BFloat16"]', "", ""],
        "concrete_inputs": ["", "", ""], "synthetic": [False, True, True],
        "kernels": [f"Memset (Device)\n{gemm}", gemm, gemm], "kernel_count": [2, 1, 1],
        "device_us": [10.0, 11.0, 100.0],
    })
    c = op_costs(ops)
    assert c.loc[0, "flops"] == 2 * 64 * 128 * 256
    assert c.loc[1, "flops"] == c.loc[0, "flops"] and c.loc[1, "bytes"] == c.loc[0, "bytes"]
    assert "twin aten::mm" in c.loc[1, "cost_note"]
    assert math.isnan(c.loc[2, "flops"])


def test_a_fix_resting_on_an_unknown_cost_is_less_sure_and_claims_only_the_known_part():
    base = dict(module="enc/attn", op_class="softmax", framework_op="aten::_softmax", source_framework_op="aten::_softmax",
                source_kernels=1, target_kernels=1, dtype="fp32", target_device_type="cuda", source_device_type="cuda")
    groups = pd.DataFrame([
        {**base, "group_id": "a", "source_us": 10.0, "target_us": 30.0, "flops": 1e6, "bytes": 1e6,
         "roofline_us": 1.0, "recoverable_us": 20.0, "demonstrated_us": 20.0},
        {**base, "group_id": "b", "source_us": 10.0, "target_us": 30.0, "flops": np.nan, "bytes": np.nan,
         "roofline_us": np.nan, "recoverable_us": np.nan, "demonstrated_us": 20.0},
    ])
    known_only = {f.fix_id: f for f in rank_fixes(groups.iloc[:1])}
    both = {f.fix_id: f for f in rank_fixes(groups)}
    assert both, "some fix applies to a 3x slower softmax"
    for fix_id, f in both.items():
        if "b" in f.group_ids:
            assert f.recoverable_us == pytest.approx(known_only[fix_id].recoverable_us if fix_id in known_only else 0.0)
            order = ["low", "medium", "high"]
            if fix_id in known_only:
                assert order.index(f.confidence) < order.index(known_only[fix_id].confidence) or f.confidence == "low"
            assert any("no cost model" in e for e in f.evidence)
