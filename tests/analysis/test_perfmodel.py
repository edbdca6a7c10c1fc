"""Perf model: op costs checked against torch's own FLOP counter on real ops, device
ceilings looked up for the corpus's real device names, roofline arithmetic by hand."""

from __future__ import annotations

import gzip
import json
import math
import time

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile
from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count

from porter.core.errors import PorterError
from porter.core.opclass import classify_op
from porter.analysis.opcost import canonical_dtype, cost_of, op_costs
from porter.analysis.perfmodel import Ceilings, ceilings_for, expected_from_source_us, load_devices, recoverable_us, roofline_us


def _profiled_rows(fn) -> list[dict]:
    """Run fn under the real profiler and return its ops as schema-like rows."""
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        fn()
    rows = []
    for e in prof.events():
        rows.append({
            "framework_op": e.name,
            "op_class": classify_op(e.name),
            "input_shapes": json.dumps(e.input_shapes),
            "dtypes": json.dumps([str(d) for d in e.input_dtypes]),
            "concrete_inputs": json.dumps([None if c is None else c for c in e.concrete_inputs], default=str),
        })
    return rows


def _counted(fn) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def _row(rows: list[dict], name: str) -> dict:
    return next(r for r in rows if r["framework_op"] == name)


MATMUL_CASES = [
    ("aten::mm", lambda: torch.mm(torch.randn(64, 32), torch.randn(32, 48))),
    ("aten::addmm", lambda: torch.addmm(torch.randn(48), torch.randn(64, 32), torch.randn(32, 48))),
    ("aten::bmm", lambda: torch.bmm(torch.randn(3, 16, 8), torch.randn(3, 8, 12))),
    ("aten::baddbmm", lambda: torch.baddbmm(torch.randn(3, 16, 12), torch.randn(3, 16, 8), torch.randn(3, 8, 12))),
    ("aten::linear", lambda: F.linear(torch.randn(4, 8, 16), torch.randn(5, 16), torch.randn(5))),
    ("aten::matmul", lambda: torch.matmul(torch.randn(2, 3, 16, 8), torch.randn(8, 12))),
]


@pytest.mark.parametrize("name,fn", MATMUL_CASES, ids=[c[0] for c in MATMUL_CASES])
def test_matmul_flops_match_torch_flop_counter(name, fn):
    rows = _profiled_rows(fn)
    r = _row(rows, name)
    cost = cost_of(r["framework_op"], r["op_class"], r["input_shapes"], r["dtypes"])
    assert cost.flops == _counted(fn)
    assert cost.dtype == "fp32"


CONV_CASES = [
    ("conv2d s2 p1", lambda: F.conv2d(torch.randn(2, 8, 10, 10), torch.randn(6, 8, 3, 3), stride=2, padding=1)),
    ("conv1d s1 p0 d2", lambda: F.conv1d(torch.randn(2, 4, 32), torch.randn(8, 4, 5), dilation=2)),
    ("conv3d groups", lambda: F.conv3d(torch.randn(1, 4, 6, 6, 6), torch.randn(8, 2, 3, 3, 3), padding=1, groups=2)),
]


@pytest.mark.parametrize("label,fn", CONV_CASES, ids=[c[0] for c in CONV_CASES])
def test_conv_flops_match_torch_flop_counter(label, fn):
    rows = _profiled_rows(fn)
    expected = _counted(fn)
    # Every level of the conv stack (conv2d -> convolution -> _convolution -> mkldnn_convolution)
    # records its own argument order; each must give the same count.
    convs = [r for r in rows if "conv" in r["framework_op"]]
    assert len(convs) >= 3
    for r in convs:
        cost = cost_of(r["framework_op"], r["op_class"], r["input_shapes"], r["dtypes"], r["concrete_inputs"])
        assert cost.flops == expected, r["framework_op"]


def test_conv_without_strides_assumes_same_padding_and_says_so():
    fn = lambda: F.conv2d(torch.randn(2, 8, 10, 10), torch.randn(6, 8, 3, 3), stride=2, padding=1)  # noqa: E731
    r = _row(_profiled_rows(fn), "aten::conv2d")
    cost = cost_of(r["framework_op"], r["op_class"], r["input_shapes"], r["dtypes"])  # no concrete inputs
    # stride 2 quarters the output positions; assuming stride 1 overestimates by exactly 4x here
    assert cost.flops == 4 * _counted(fn)
    assert "assumed" in cost.note


def test_attention_flops_match_torch_math_path():
    q, k, v = torch.randn(2, 4, 16, 8), torch.randn(2, 4, 24, 8), torch.randn(2, 4, 24, 8)
    rows = _profiled_rows(lambda: F.scaled_dot_product_attention(q, k, v))
    r = _row(rows, "aten::scaled_dot_product_attention")
    cost = cost_of(r["framework_op"], r["op_class"], r["input_shapes"], r["dtypes"])
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):  # the math path is bmm + softmax + bmm, which the counter sees
        counted = _counted(lambda: F.scaled_dot_product_attention(q, k, v))
    assert cost.flops == counted == sdpa_flop_count(q.shape, k.shape, v.shape)


def test_flash_forward_layout_is_batch_seq_heads_dim():
    # aten::_flash_attention_forward as recorded on the corpus H100 (q/k/v [B, S, H, D]).
    shapes = json.dumps([[16, 559, 16, 64]] * 3 + [[]] * 12)
    dtypes = json.dumps(["c10::BFloat16"] * 3 + [""] * 12)
    cost = cost_of("aten::_flash_attention_forward", "attention", shapes, dtypes)
    bhsd = torch.Size([16, 16, 559, 64])
    assert cost.flops == sdpa_flop_count(bhsd, bhsd, bhsd)
    assert cost.dtype == "bf16"


def test_gemm_flops_agree_with_tracelens_reference(corpus):
    """TraceLens's own GEMM table for the Qwen H100 trace: a peer's FLOP count per shape."""
    ref = pd.read_csv(corpus / "reference" / "tracelens_qwen_h100_vs_mi300x" / "GEMM_intersect_mi300.csv")
    for _, row in ref.iterrows():
        dims = json.loads(row["h100::Input Dims_first"].replace("(", "[").replace(")", "]").replace(",]", "]"))
        types = json.dumps(list(eval(row["h100::Input type_first"])))  # a Python tuple literal of strings
        cost = cost_of(row["name"], "matmul", json.dumps(dims), types)
        # TraceLens adds M*N FLOPs for the bias add of addmm; porter follows torch's counter
        # (2*M*K*N, bias ignored), so take the bias term off the peer's number.
        bias = row["param: M"] * row["param: N"] * row["param: B"] if row["param: bias"] else 0
        assert cost.flops == pytest.approx(row["h100::GFLOPS_first"] * 1e9 - bias, rel=1e-9), row["name"]


def test_view_ops_move_no_bytes_and_copies_read_and_write():
    c = cost_of("aten::view", "copy", "[[16, 559], []]", '["long int", "ScalarList"]')
    assert (c.flops, c.bytes) == (0.0, 0.0)
    c = cost_of("aten::copy_", "copy", "[[1, 1, 559], [1, 1, 559], []]", '["float", "long int", "Scalar"]')
    assert c.bytes == 559 * 4 + 559 * 8  # write fp32 destination, read int64 source
    c = cost_of("aten::add", "elementwise", "[[16, 559, 1024], [16, 559, 1024]]", '["c10::BFloat16", "c10::BFloat16"]')
    assert c.bytes == 3 * 16 * 559 * 1024 * 2 and c.flops == 16 * 559 * 1024


def test_trace_flops_win_and_table_is_fast():
    n = 20_000
    ops = pd.DataFrame({
        "framework_op": ["aten::mm", "aten::add", "aten::softmax", "aten::layer_norm"] * (n // 4),
        "op_class": ["matmul", "elementwise", "softmax", "norm"] * (n // 4),
        "input_shapes": [f"[[{i % 50 + 1}, 64], [64, 32]]" for i in range(n)],
        "dtypes": ['["c10::Half", "c10::Half"]'] * n,
        "flops": [np.nan] * (n - 1) + [123.0],
    })
    start = time.perf_counter()
    costs = op_costs(ops)
    assert time.perf_counter() - start < 1.0
    assert costs["flops"].iloc[0] == 2 * 1 * 64 * 32
    assert costs["flops"].iloc[-1] == 123.0
    assert (costs["dtype"] == "fp16").all()


@pytest.mark.parametrize("raw,canon", [("float", "fp32"), ("c10::BFloat16", "bf16"), ("c10::Half", "fp16"),
                                       ("double", "fp64"), ("long int", "int64"), ("Scalar", ""), ("bf16", "bf16")])
def test_canonical_dtype(raw, canon):
    assert canonical_dtype(raw) == canon


def _device_names(corpus, pattern: str) -> set[str]:
    names = set()
    for path in sorted((corpus / "kineto").glob(pattern)):
        with gzip.open(path) as fh:
            names |= {p["name"] for p in json.load(fh).get("deviceProperties", [])}
    return names


def test_ceilings_for_corpus_device_names(corpus):
    h100 = _device_names(corpus, "h100_*.json.gz")
    mi300 = _device_names(corpus, "mi300x_*.json.gz")
    assert h100 == {"NVIDIA H100 80GB HBM3"}
    assert mi300 >= {"AMD Instinct MI300X VF", "AMD Instinct MI300X"}
    c, why = ceilings_for({"device": {"name": "NVIDIA H100 80GB HBM3"}})
    assert c.bytes_per_s == 3.35e12 and c.peak_flops("bf16") == 989.5e12 and "datasheet" in why
    for name in mi300:
        c, _ = ceilings_for({"device": {"name": name}})
        assert c.device == "AMD Instinct MI300X" and c.bytes_per_s == 5.3e12


def test_a100_memory_variant_from_properties(corpus):
    with gzip.open(corpus / "kineto" / "a100_alexnet.json.gz") as fh:
        props = json.load(fh)["deviceProperties"][0]
    # A100-PG509-200 reports ~42 GB: the 40 GB part (1.555 TB/s), not the 80 GB one
    c, _ = ceilings_for({"device": {"name": props["name"], "properties": props}})
    assert c.device == "NVIDIA A100 40GB SXM"
    c, _ = ceilings_for({"device": {"name": "NVIDIA A100-SXM4-80GB"}})
    assert c.device == "NVIDIA A100 80GB SXM"


def test_unknown_device_and_measured_ceilings():
    c, why = ceilings_for({"device": {"name": "AMD Radeon Graphics"}})
    assert c is None and "AMD Radeon Graphics" in why
    manifest = {"device": {"name": "NVIDIA H100 80GB HBM3"},
                "ceilings": {"matmul_flops_per_s": 700e12, "dtype": "torch.bfloat16", "copy_bytes_per_s": 2.9e12}}
    c, why = ceilings_for(manifest)
    assert c.measured and "measured" in why
    assert c.peak_flops("bf16") == 700e12 and c.bytes_per_s == 2.9e12
    # other dtypes keep the datasheet ratio: fp32 scaled by 700/989.5
    assert c.peak_flops("fp32") == pytest.approx(67e12 * 700 / 989.5)
    # the shape porter.capture.run writes: matmul_dtype as torch spells it
    c, _ = ceilings_for({"device": {"name": "mystery"}, "ceilings": {"matmul_flops_per_s": 1e12, "matmul_dtype": "float32"}})
    assert c.peak_flops("fp32") == 1e12 and math.isnan(c.bytes_per_s)


def test_every_table_entry_has_a_source_and_required_devices():
    specs = load_devices()
    for s in specs:
        assert s.source and s.url.startswith("https://") and s.bytes_per_s > 0
        assert {"bf16", "fp32"} <= set(s.flops_per_s)
    names = [s.name for s in specs]
    for want in ("A100", "H100", "H200", "B200", "MI250X", "MI300X", "TPU v4", "TPU v5e", "TPU v5p", "TPU v6e"):
        assert any(want in n for n in names), want
    for kind, want in [("TPU v4", "tpu-v4"), ("TPU v5 lite", "tpu-v5e"), ("TPU v5p", "tpu-v5p"), ("TPU v6 lite", "tpu-v6e")]:
        assert next(s.id for s in specs if s.matches(kind, None)) == want


def test_bad_device_table_is_a_porter_error(tmp_path):
    bad = tmp_path / "devices.toml"
    bad.write_text("[[device]]\nid = 'x'\n")
    with pytest.raises(PorterError):
        load_devices(bad)


# Round-number devices so every expectation is mental arithmetic.
TGT = Ceilings("T", {"bf16": 100e12, "fp32": 10e12}, 1e12, "test")
SRC = Ceilings("S", {"bf16": 50e12, "fp32": 5e12}, 0.5e12, "test")  # half of T everywhere
GEMM_FLOPS, GEMM_BYTES = 2.0 * 1024**3, 3.0 * 1024**2 * 2  # bf16 1024^3 matmul
ADD_FLOPS, ADD_BYTES = 1e6, 12e6  # fp32 add of 1M elements: read 2, write 1


def test_roofline_by_hand():
    # gemm: compute 2.147e9 / 100e12 = 21.47 us beats memory 6.29e6 / 1e12 = 6.29 us
    assert roofline_us(GEMM_FLOPS, GEMM_BYTES, TGT, "bf16")[0] == pytest.approx(21.474836)
    # add: memory 12e6 / 1e12 = 12 us beats compute 1e6 / 10e12 = 0.1 us
    assert roofline_us(ADD_FLOPS, ADD_BYTES, TGT, "fp32")[0] == pytest.approx(12.0)
    # unknown flops: the memory term alone; nothing known: NaN; no ceilings: NaN
    out = roofline_us([np.nan, np.nan], [4e6, np.nan], TGT, "fp32")
    assert out[0] == pytest.approx(4.0) and np.isnan(out[1])
    assert np.isnan(roofline_us(1.0, 1.0, None)[0])


def test_recoverable_by_hand():
    rl_gemm = roofline_us(GEMM_FLOPS, GEMM_BYTES, TGT, "bf16")
    # compute-bound on both: source roofline 42.9 us, target 21.5 us -> scale 0.5; source 100 -> 50 us.
    scaled, basis = expected_from_source_us(100.0, SRC, TGT, flops=GEMM_FLOPS, bytes_=GEMM_BYTES, dtype="bf16")
    assert scaled[0] == pytest.approx(50.0) and basis[0] == "compute"
    # target 80 us: min(roofline 21.47, scaled 50) = 21.47 -> 58.53 us recoverable
    rec = recoverable_us(80.0, 100.0, rl_gemm, SRC, TGT, flops=GEMM_FLOPS, bytes_=GEMM_BYTES, dtype="bf16")
    assert rec[0] == pytest.approx(80 - 21.474836)
    # memory-bound add: target 30, source 40 -> scaled 20, roofline 12 -> 18
    rl_add = roofline_us(ADD_FLOPS, ADD_BYTES, TGT, "fp32")
    assert recoverable_us(30.0, 40.0, rl_add, SRC, TGT, flops=ADD_FLOPS, bytes_=ADD_BYTES)[0] == pytest.approx(18.0)
    # already faster than both bounds: never negative
    assert recoverable_us(5.0, 40.0, rl_add, SRC, TGT, flops=ADD_FLOPS, bytes_=ADD_BYTES)[0] == 0.0
    # unknown cost: roofline NaN, source scaled by the bandwidth ratio 0.5: 30 - 40*0.5 = 10
    scaled, basis = expected_from_source_us(40.0, SRC, TGT)
    assert basis[0] == "bandwidth ratio"
    assert recoverable_us(30.0, 40.0, np.nan, SRC, TGT)[0] == pytest.approx(10.0)
    # no ceilings for the source: the source time is taken unscaled, 50 - 40 = 10
    assert recoverable_us(50.0, 40.0, np.nan, None, TGT)[0] == pytest.approx(10.0)
