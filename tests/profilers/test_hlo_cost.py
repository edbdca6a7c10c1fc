"""FLOPs and bytes of XLA ops from the HloProto shapes (profilers/hlo_cost.py)."""

from __future__ import annotations

import json
import math

import pytest

from conftest import corpus_dir
from porter.bundles.ingest import open_any


@pytest.mark.corpus
def test_cudnn_conv_flops_follow_from_its_kernel_and_the_output_the_next_op_reads():
    path = corpus_dir() / "xplane" / "mi300x_jax_conv3d.xplane.pb"
    if not path.is_file():
        pytest.skip(f"trace corpus not found at {corpus_dir()}")
    ops = open_any(path).ops
    conv = ops[ops["name"].str.startswith("cudnn-conv")].iloc[0]
    inp, kernel = json.loads(conv["input_shapes"])
    assert inp[1] == kernel[1] == 16  # NCDHW input, OIDHW kernel: 16 input channels
    # the conv's result is what the transpose fusion after it reads (its only operand)
    consumer = ops[ops["name"] == "input_transpose_fusion"].iloc[0]
    (out,) = json.loads(consumer["input_shapes"])
    assert out[1] == kernel[0]  # 5120 output features
    want = 2.0 * math.prod(out) * math.prod(kernel[1:])
    assert conv["flops"] == pytest.approx(want, rel=1e-12)
    assert conv["bytes"] >= 2 * (math.prod(inp) + math.prod(kernel))  # bf16 operands read at least once
    assert (ops.loc[ops["synthetic"], "flops"].isna()).all()  # stand-ins have no HLO op


@pytest.mark.slow
def test_live_xla_matmul_flops_equal_the_eager_source_flops(tmp_path):
    """The same model on cpu (torch shapes) and xla (HLO shapes): the matmul FLOPs agree to 1e-9,
    and >= 95% of each side's time has a known cost (the issue's demo bar)."""
    from porter.capture.interleaved import InterleaveOptions
    from porter.capture.options import CaptureOptions
    from porter.pipeline.diagnose import diagnose_specs

    d, path = diagnose_specs("cpu", "xla", tmp_path / "d", model="transformer", report=False,
                             capture_options=CaptureOptions(steps=2, warmup=1, repeats=3, activations=False),
                             interleave=InterleaveOptions(min_pairs=10, budget_s=1.0))
    j = json.loads(path.read_text())
    share = j["roofline"]["totals"]["known_cost_share"]
    assert share["source"] >= 0.95 and share["target"] >= 0.95, share
    steps = {side: j["inputs"][side]["steps"] for side in ("source", "target")}
    flops = {}
    for side in ("source", "target"):
        ops = open_any(tmp_path / "d" / side).ops
        per_op = ops.loc[ops["op_class"] == "matmul"]
        if side == "source":  # torch: the leaf GEMMs (aten::linear/matmul wrap them)
            per_op = per_op[per_op["framework_op"].isin(["aten::addmm", "aten::mm", "aten::bmm"])]
        from porter.analysis.opcost import op_costs

        flops[side] = float(op_costs(per_op)["flops"].sum()) / steps[side]
    assert flops["target"] == pytest.approx(flops["source"], rel=1e-9)
