"""Opportunities on a faster target: headroom fixes, labelled apart from regressions.

The owlv2 case (the target wins overall yet runs its vision attention far from its own
roofline) built from a corpus pair: Falconsai ViT with the direction swapped, MI300X ->
H100, so the target (H100) is faster overall."""

from __future__ import annotations

import pytest

from conftest import corpus_dir
from porter.analysis.fixrank import HEADROOM, HEADROOM_EFFICIENCY, REGRESSION
from porter.pipeline.diagnose import analyse
from porter.bundles.ingest import open_any

PAIR = ("mi300x_Falconsai_nsfw_image_detection", "h100_Falconsai_nsfw_image_detection")


@pytest.mark.corpus
def test_faster_target_gets_headroom_fixes_on_its_attention():
    src, tgt = (corpus_dir() / "kineto" / f"{n}.json.gz" for n in PAIR)
    if not src.is_file():
        pytest.skip(f"trace corpus not found at {corpus_dir()}")
    d = analyse(open_any(src), open_any(tgt))
    assert d.e2e.ratio < 1.0  # the target is faster overall
    fixes = [f for f in d.extras["fixes"] if f["kind"] == "perf"]
    assert {f["opportunity"] for f in fixes} <= {REGRESSION, HEADROOM}
    headroom = [f for f in fixes if f["opportunity"] == HEADROOM]
    attention = [f for f in headroom if "attention" in f["op_classes"]]
    assert attention, [(f["fix_id"], f["op_classes"]) for f in headroom]
    assert any("attention" in op for f in attention for op in f["ops"])  # names the attention ops
    roof = {str(r["group_id"]): r for r in d.extras["roofline"]["groups"]}
    groups = {str(g): (s, t) for g, s, t in zip(d.groups["group_id"], d.groups["source_us"], d.groups["target_us"])}
    for f in headroom:
        assert f["evidence"][0].startswith("headroom: target at")
        for gid in f["group_ids"]:
            assert roof[gid]["efficiency"] <= HEADROOM_EFFICIENCY
            s, t = groups[gid]
            assert t < 2.0 * s  # below every catalogue min_ratio's reach would be a regression instead
