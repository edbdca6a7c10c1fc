"""Alignment on the real H100/MI300X corpus pairs, checked against raw files and TraceLens."""

from __future__ import annotations

import pandas as pd
import pytest

from porter.analysis.align import UNMATCHED, align, align_sequences
from porter.analysis.attribute import module_kind
from porter.bundles.ingest import open_any

PAIRS = ("gaunernst_bert-small-uncased", "Falconsai_nsfw_image_detection", "Qwen_Qwen1.5-0.5B-Chat")
_CACHE: dict = {}


def _pair(corpus, pair):
    if pair not in _CACHE:
        src, tgt = corpus / "kineto" / f"h100_{pair}.json.gz", corpus / "kineto" / f"mi300x_{pair}.json.gz"
        if not (src.exists() and tgt.exists()):
            pytest.skip(f"{pair} not in the corpus")
        s, t = open_any(src), open_any(tgt)
        _CACHE[pair] = (s, t, align(s.ops, t.ops, s.kernels, t.kernels))
    return _CACHE[pair]


@pytest.mark.corpus
@pytest.mark.parametrize("pair", PAIRS)
def test_coverage_at_least_99_5_percent(corpus, pair):
    s, t, al = _pair(corpus, pair)
    cov = al.coverage()
    assert cov["source"] >= 0.995 and cov["target"] >= 0.995, cov
    # coverage is measured against all device time: the charged totals are the kernel totals
    assert al.source_times.total == pytest.approx(float(s.kernels["dur_us"].sum()), rel=1e-9)
    assert al.target_times.total == pytest.approx(float(t.kernels["dur_us"].sum()), rel=1e-9)
    # every op with device time is in exactly one group or listed as unmatched
    for ops, member in ((s.ops, al.source_group), (t.ops, al.target_group)):
        timed = set(ops.loc[ops["device_us"] > 0, "op_id"])
        assert timed == set(member.index)
    ids = [i for g in al.groups["source_ids"] for i in g]
    assert len(ids) == len(set(ids))


@pytest.mark.corpus
def test_cudnn_and_miopen_convolution_match(corpus):
    s, t, al = _pair(corpus, "Falconsai_nsfw_image_detection")
    cs = s.ops.loc[s.ops["framework_op"].str.contains("cudnn_convolution"), "op_id"]
    ct = t.ops.loc[t.ops["framework_op"].str.contains("miopen_convolution"), "op_id"]
    assert len(cs) == 1 and len(ct) == 1
    gs, gt = al.source_group[cs.iloc[0]], al.target_group[ct.iloc[0]]
    assert gs != UNMATCHED and gs == gt
    g = al.groups.set_index("group_id").loc[gs]
    assert g["evidence"].startswith("scope") and g["op_class"] == "conv"


@pytest.mark.corpus
def test_vendor_attention_kernels_pair_per_layer(corpus):
    """flash attention on H100 and on MI300X pair layer by layer (same scope, same class)."""
    s, t, al = _pair(corpus, "Qwen_Qwen1.5-0.5B-Chat")
    att_s = s.ops[(s.ops["op_class"] == "attention") & (s.ops["device_us"] > 0) & (s.ops["module"] != "")]
    att_t = t.ops.set_index("op_id")
    assert len(att_s) >= 24
    for row in att_s.itertuples():
        g = al.source_group[row.op_id]
        tgt_ids = al.groups.set_index("group_id").loc[g, "target_ids"]
        assert any(att_t.loc[i, "module"] == row.module for i in tgt_ids)


@pytest.mark.corpus
def test_qwen_per_op_totals_match_tracelens(corpus):
    """TraceLens ops_summary.csv: per aten op direct kernel time inside the profiled step."""
    ref = corpus / "reference" / "tracelens_qwen_h100_vs_mi300x" / "ops_summary.csv"
    tl = pd.read_csv(ref).set_index("name")
    s, t, _ = _pair(corpus, "Qwen_Qwen1.5-0.5B-Chat")
    for bundle, col in ((s, "h100::total_direct_kernel_time_ms"), (t, "mi300::total_direct_kernel_time_ms")):
        ops = bundle.ops[(bundle.ops["step"] >= 0) & ~bundle.ops["synthetic"]]
        ours = ops.groupby("name")["device_us"].sum() / 1e3
        theirs = tl[col].dropna()
        theirs = theirs[theirs > 0]
        for name, ms in theirs.items():
            assert ours.get(name, 0.0) == pytest.approx(ms, rel=0.01, abs=2e-3), name


def test_align_sequences_pairs_common_subsequence_and_keeps_gaps():
    blocks = align_sequences(["matmul", "elementwise", "norm", "matmul"], ["matmul", "norm", "copy", "matmul"])
    pairs = [(b.src, b.tgt) for b in blocks if b.kind == "pair"]
    assert pairs == [([0], [0]), ([2], [1]), ([3], [3])]
    gaps = [(b.src, b.tgt) for b in blocks if b.kind == "gap"]
    assert gaps == [([1], []), ([], [2])]


def test_module_kind_folds_instances():
    assert module_kind("Qwen2Model_0/Qwen2DecoderLayer_13/Qwen2Attention_13") == "Qwen2Model/Qwen2DecoderLayer/Qwen2Attention"
    assert module_kind("blocks/3/attn") == "blocks/*/attn"
    assert module_kind("") == ""
