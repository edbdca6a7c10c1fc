"""A fused kernel split among its member modules by the source's measured time for the same op
calls (porter.analysis.split_fused, fused_shares, call_times), on rows from a real capture:
resnet_wide cpu -> cpu:inductor (tests/models/library_models.py), layer1's first BatchNorm +
ReLU kernel as inductor's provenance recorded it (labelled with the block, listing the next
convolution whose input it lays out) and the eager calls of the same modules, step 0."""

from __future__ import annotations

import json

import pytest

from porter.analysis.align import align
from porter.analysis.call_times import calls_apart, measured_calls
from porter.analysis.fused_shares import decode
from porter.analysis.op_calls import FUSED_MEASURED
from porter.analysis.optime import op_times
from porter.analysis.split_fused import split_fused
from tests.e2e.test_live_identity import _ops

KERNEL = "graph_0_cpp_fused__native_batch_norm_legit_no_training_convolution_relu_1"
MEMBERS = [["layer1/bn1", "aten::add", 0.800012], ["layer1/relu", "aten::relu", 0.199988]]
CALL_MEMBERS = [["layer1/bn1", "batch_norm#0", 0.800012206], ["layer1/relu", "relu#0", 0.199987794],
                ["layer1/conv2", "conv2d#0", 0.0]]
REL = 1e-6


def _pair():
    src = _ops([(28, -1, "layer1/bn1", "aten::batch_norm", 196.458), (31, 28, "layer1/bn1", "aten::native_batch_norm", 184.652),
                (38, -1, "layer1/relu", "aten::relu", 149.314), (39, 38, "layer1/relu", "aten::clamp_min", 144.634),
                (40, -1, "layer1/conv2", "aten::conv2d", 2495.105), (43, 40, "layer1/conv2", "aten::mkldnn_convolution", 2479.639)])
    tgt = _ops([(17, -1, "layer1", KERNEL, 244.781), (18, -1, "layer1/conv2", "aten::convolution", 2196.770)])
    tgt["call"] = ["", "conv2d#0"]
    tgt["members"] = [json.dumps(MEMBERS), ""]
    tgt["call_members"] = [json.dumps(CALL_MEMBERS), ""]
    return src, tgt


def test_the_kernel_goes_to_its_members_by_eagers_time_for_each_call():
    src, tgt = _pair()
    measured = measured_calls(src, op_times(src))
    # eager's time per call: the whole call, its children inside it
    assert measured[("layer1/bn1", "batch_norm", 0)] == pytest.approx(196.458, rel=REL)
    assert measured[("layer1/relu", "relu", 0)] == pytest.approx(149.314, rel=REL)
    apart = calls_apart(tgt, op_times(tgt))
    assert apart == {("layer1/conv2", "conv2d#0")}  # its extern kernel ran alone on the target
    split = split_fused(tgt, measured, apart)
    kids = split.ops[split.ops["parent_id"] == 17].set_index("module")
    bn, relu = 196.458 / (196.458 + 149.314), 149.314 / (196.458 + 149.314)
    assert kids.loc["layer1/bn1", "host_us"] == pytest.approx(244.781 * bn, rel=REL)
    assert kids.loc["layer1/relu", "host_us"] == pytest.approx(244.781 * relu, rel=REL)
    assert kids.loc["layer1/relu", "name"] == f"{KERNEL} [share of layer1/relu, measured]"
    # the convolution's layout member (estimated cost 0) takes nothing; the block label keeps nothing
    assert set(kids.index) == {"layer1/bn1", "layer1/relu"}
    assert split.measured_us == pytest.approx(244.781, rel=REL) and split.estimated_us == 0.0
    assert split.absorbed == {}  # nothing folded into the convolution, as the estimate's epilogue rule did
    shares = decode(split.ops.set_index("op_id").loc[17, "call_split"])
    assert [(s.module, s.measured) for s in shares] == [("layer1/bn1", True), ("layer1/relu", True), ("layer1/conv2", False)]
    # by estimate alone (no other side) the BatchNorm took 80% and both folded nowhere: 2 members over 5%
    alone = split_fused(tgt).ops
    assert alone.loc[alone["module"] == "layer1/bn1", "host_us"].sum() == pytest.approx(244.781 * 0.800012, rel=1e-5)


def test_live_alignment_pairs_each_module_with_its_measured_share():
    src, tgt = _pair()
    al = align(src, tgt, identity=True)
    g = al.groups.set_index("module")
    assert set(g["evidence"]) == {"identity"}  # each module its own group, none merged into the conv's
    times = al.target_times.values
    relu = float(times.reindex(g.loc["layer1/relu", "target_ids"]).sum())
    assert relu == pytest.approx(244.781 * 149.314 / (196.458 + 149.314), rel=REL)
    calls = al.op_calls.set_index(["module", "op", "call"])
    assert calls.loc[("layer1/relu", "relu", 0), "evidence"] == FUSED_MEASURED
    assert calls.loc[("layer1/relu", "relu", 0), "estimated_us"] == 0.0
    assert al.stats["target_split_by_measurement_share"] == pytest.approx(244.781 / (244.781 + 2196.770), rel=1e-6)
