"""Op-call identity on ORT and inside fusions: each ONNX node carries the eager call it came
from (porter.targets.onnx_calls), and a fused op that holds several calls (an XLA fusion, an
ORT fused node) has its time split among them by estimated cost (ops.call_members,
porter.analysis.op_calls.fused_call_shares). Real library models: tests/models/library_models.py."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pandas as pd
import pytest
import torch

from porter.analysis.align import align
from porter.analysis.fused_shares import decode
from porter.analysis.op_calls import FUSED_MEASURED, FUSED_SHARE, IDENTITY_CALL, fused_call_shares
from porter.core.elementcost import element_weight
from porter.bundles.bundle import load_bundle
from porter.capture.run import capture
from porter.pipeline.diagnose import analyse
from porter.core.schema import encode_call_members
from tests.e2e.test_live_identity import LIVE_OPTS, _ops, source_bundles  # noqa: F401 (a fixture: eager captures once per module)

LIBRARY = Path(__file__).parents[1] / "models" / "library_models.py"
REL = 1e-6  # shares are normalised floats: a split's parts add up to the whole to rounding


def test_call_members_sum_per_call_and_leave_untagged_members_out():
    got = json.loads(encode_call_members([("a", "gelu#0", 6.0), ("a", "gelu#0", 2.0), ("d", "linear#0", 2.0),
                                          ("", "", 90.0)]))
    assert got == [["a", "gelu#0", 0.8], ["d", "linear#0", 0.2]]
    assert encode_call_members([("a", "gelu#0", 1.0), ("", "", 5.0)]) == ""  # one call: nothing to split


def _pair() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Eager: a dense layer's linear (300 us) and a GELU (100 us). Target: the dense layer's dot
    (80 us) and one fusion (50 us) of its bias add (20% of the estimated cost) with the GELU."""
    src = _ops([(1, -1, "d", "aten::linear", 300.0), (2, -1, "a", "aten::gelu", 100.0)])
    tgt = _ops([(1, -1, "d", "dot.1", 80.0), (2, -1, "a", "add_erf_fusion", 50.0)])
    tgt["call"] = ["linear#0", "gelu#0"]
    tgt["members"] = ["", json.dumps([["a", "erf", 0.8], ["d", "add", 0.2]])]
    tgt["call_members"] = ["", json.dumps([["a", "gelu#0", 0.8], ["d", "linear#0", 0.2]])]
    return src, tgt


def test_a_fusion_holding_two_calls_is_split_between_them_by_the_sources_time_where_it_pairs():
    src, tgt = _pair()
    al = align(src, tgt, identity=True)
    calls = al.op_calls.set_index(["module", "op", "call"])
    # the dense layer's call ran its dot apart on the target, so eager's 300 us for it are not the
    # bias add's: that share stays the estimate's 20%, the one estimated part of the row
    assert calls.loc[("d", "linear", 0), "target_us"] == pytest.approx(80.0 + 0.2 * 50.0, rel=REL)
    assert calls.loc[("d", "linear", 0), "estimated_us"] == pytest.approx(10.0, rel=REL)
    assert calls.loc[("d", "linear", 0), "evidence"] == IDENTITY_CALL
    # the GELU's call, the only measured member, takes the rest, marked measured
    assert calls.loc[("a", "gelu", 0), "target_us"] == pytest.approx(40.0, rel=REL)
    assert calls.loc[("a", "gelu", 0), "estimated_us"] == 0.0
    assert calls.loc[("a", "gelu", 0), "evidence"] == FUSED_MEASURED
    names = al.target_ops.loc[al.target_ops["parent_id"] == 2, "name"].tolist()
    assert sorted(names) == ["add_erf_fusion [share of a, measured]", "add_erf_fusion [share of d, estimated]"]
    assert al.stats["target_split_by_measurement_us"] == pytest.approx(40.0, rel=REL)
    assert al.stats["target_split_by_estimate_us"] == pytest.approx(10.0, rel=REL)
    # without the GELU call on the source (module a ran a tanh there) nothing pairs: all by estimate
    src["name"] = src["framework_op"] = ["aten::linear", "aten::tanh"]
    calls = align(src, tgt, identity=True).op_calls.set_index(["module", "op", "call"])
    assert calls.loc[("a", "gelu", 0), "evidence"] == FUSED_SHARE
    assert calls.loc[("a", "gelu", 0), "estimated_us"] == pytest.approx(40.0, rel=REL)
    assert "fused" not in set(al.op_calls["op"])  # the module shares became call shares
    # the split is of the fusion's whole time, its module shares (split_fused's child rows) included
    shares = fused_call_shares(al.target_ops, al.target_times)
    assert len(shares) == 2 and shares["us"].sum() == pytest.approx(50.0, rel=REL)
    assert al.target_times.values.reindex(shares["fused_ids"].iloc[0]).sum() == pytest.approx(50.0, rel=REL)


def test_onnx_nodes_of_one_call_share_it_and_calls_rank_in_node_order():
    from onnx import TensorProto, helper

    from profilers.onnxruntime import node_scopes_from_onnx

    def node(op, ins, outs, name, fx, target):
        n = helper.make_node(op, ins, outs, name=name)
        ns = f": M/blk: Blk/blk.fc: Linear/{fx}: {target}"
        for key, value in (("namespace", ns), ("pkg.torch.onnx.fx_node", f"%{fx} : [num_users=1] = ...")):
            n.metadata_props.add(key=key, value=value)
        return n

    vi = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, [2, 4])  # noqa: E731
    graph = helper.make_graph(
        [node("MatMul", ["x", "w"], ["m"], "node_MatMul_3", "linear", "aten.linear.default"),
         node("Add", ["m", "b"], ["l"], "node_linear", "linear", "aten.linear.default"),
         node("MatMul", ["l", "w"], ["m2"], "node_MatMul_5", "linear_1", "aten.linear.default"),
         node("Relu", ["m2"], ["r"], "node_relu", "relu", "aten.relu.default")],
        "g", [vi("x"), vi("w"), vi("b")], [vi("r")])
    scopes = node_scopes_from_onnx(helper.make_model(graph))
    assert {n: s["call"] for n, s in scopes.items()} == {
        "node_MatMul_3": "linear#0", "node_linear": "linear#0", "node_MatMul_5": "linear#1", "node_relu": "relu#0"}
    assert {s["module"] for s in scopes.values()} == {"blk/fc"}


def test_an_exporter_folded_conv_and_batch_norm_is_the_convs_call_holding_both():
    import torch

    from porter.targets.onnxruntime import OrtStack, module_of_nodes

    if not OrtStack().availability("cpu").ok:
        pytest.skip("onnxruntime/onnxscript not installed")

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.bn, self.act = torch.nn.Conv2d(3, 8, 3, bias=False), torch.nn.BatchNorm2d(8), torch.nn.ReLU()

        def forward(self, x):
            return self.act(self.bn(self.conv(x)))

    prog = torch.onnx.export(Net().eval(), (torch.randn(1, 3, 8, 8),), dynamo=True, verbose=False)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "net.onnx"
        prog.save(str(path))
        plain = module_of_nodes(path)
        nodes = module_of_nodes(path, prog.exported_program.graph_module)
    conv = [n for n, s in nodes.items() if s.get("framework_op") == "aten::conv2d"]
    assert len(conv) == 1, nodes
    s = nodes[conv[0]]
    assert plain[conv[0]]["module"] == "bn"  # the exporter's fold left the batch norm's metadata on the Conv
    assert (s["module"], s["call"]) == ("conv", "conv2d#0")
    members = json.loads(s["call_members"])
    assert [m[:2] for m in members] == [["conv", "conv2d#0"], ["bn", "batch_norm#0"]]
    # 2 * output (8*6*6) * (weight 3*3*3) for the conv against one per output element for the batch norm
    conv_cost, bn_cost = 2 * 288 * 27, 288
    assert members[0][2] == pytest.approx(conv_cost / (conv_cost + bn_cost), rel=1e-6)
    assert nodes[next(n for n, v in nodes.items() if v.get("framework_op") == "aten::relu")]["call"] == "relu#0"


# ---------------------------------------------------------------- real library models

def _live(model: str, target: str, sources, tmp_path):
    capture(f"{LIBRARY}:{model}", target, tmp_path / "tgt", LIVE_OPTS)
    return analyse(sources(model), load_bundle(tmp_path / "tgt")).alignment


@pytest.mark.slow
def test_ort_bert_pairs_every_dense_linear_call_by_identity(source_bundles, tmp_path):
    al = _live("bert_small", "cpu:ort", source_bundles, tmp_path)
    src = al.source_ops
    linear = src[(src["name"] == "aten::linear") & (src["step"] == src["step"].max())]
    assert len(linear) == 12  # 2 layers x (query, key, value, attention out, intermediate, output)
    calls = al.op_calls
    paired = calls[(calls["op"] == "linear") & (calls["evidence"] == IDENTITY_CALL)]
    assert set(paired["module"]) == set(linear["module"])
    assert (paired["source_us"] > 0).all() and (paired["target_us"] > 0).all()
    assert al.stats["target_op_calls_identity_share"] > 0.5


@pytest.mark.slow
def test_ort_resnet_charges_convolutions_to_conv_modules(source_bundles, tmp_path):
    al = _live("small_resnet", "cpu:ort", source_bundles, tmp_path)
    convs = {n.replace(".", "/") for n, m in _resnet().named_modules() if isinstance(m, __import__("torch").nn.Conv2d)}
    assert len(convs) == 9
    times, ops = al.target_times.values, al.target_ops.set_index("op_id")
    by_module: dict[str, float] = {}
    for g in al.groups.itertuples():
        heavy = [i for i in g.target_ids if ops.loc[i, "op_class"] == "conv"]
        if heavy:
            by_module[g.module] = float(times.reindex(heavy).sum())
    assert set(by_module) == convs, by_module  # each conv's time in its own group, none on a batch norm
    calls = al.op_calls.set_index(["module", "op", "call"])
    for m in convs:
        assert calls.loc[(m, "conv2d", 0), "target_us"] > 0


def _resnet():
    from tests.models import library_models

    return library_models.small_resnet()[0]


@pytest.mark.slow
def test_xla_gelu_fusion_member_calls_each_get_a_share_summing_to_its_time(source_bundles, tmp_path):
    al = _live("bert_small", "xla", source_bundles, tmp_path)
    ops = al.target_ops
    gelu = ops[ops["call_members"].str.contains('"gelu#0"', regex=False)
               & ~ops["name"].str.contains("[share of", regex=False)]
    assert len(gelu), "no XLA fusion holds a GELU call with another"
    shares = fused_call_shares(ops, al.target_times)
    steps = ops.loc[ops["step"] >= 0, "step"].nunique()
    for op_id in gelu["op_id"]:
        mine = shares[shares["op_id"] == op_id]
        members = json.loads(ops.set_index("op_id").loc[op_id, "call_members"])
        assert len(mine) == len(members) >= 2
        whole = al.target_times.values.reindex(mine["fused_ids"].iloc[0]).sum()
        assert mine["us"].sum() == pytest.approx(whole, rel=REL)
        calls = al.op_calls.set_index(["module", "op", "call"])
        # eager ran each member call unfused: the GELU by its measured time; the dense layer's call,
        # whose dot XLA ran apart, by the estimate for its bias add
        priced = {(c.module, c.call): c.measured for c in decode(ops.set_index("op_id").loc[op_id, "call_split"])}
        assert priced and any(priced.values())
        for r in mine.itertuples():
            row = calls.loc[(r.module, r.op, r.k)]
            assert row["target_us"] >= r.us / steps * (1 - REL)  # every member call carries its share
            if not priced[(r.module, f"{r.op}#{r.k}")]:
                assert row["estimated_us"] >= r.us / steps * (1 - REL)
    act = al.op_calls[(al.op_calls["op"] == "gelu")]
    assert len(act) == 2 and set(act["evidence"]) == {FUSED_MEASURED}
    assert (act["estimated_us"] == 0).all()


def test_an_ort_helper_feeding_one_node_is_that_nodes_call():
    from onnx import TensorProto, helper

    from porter.targets.onnxruntime import scopes_of_optimized

    vi = lambda name, dims: helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)  # noqa: E731
    original = helper.make_graph(
        [helper.make_node("LayerNormalization", ["x", "s"], ["ln"], name="node_layer_norm"),
         helper.make_node("MatMul", ["ln", "w"], ["mm"], name="node_MatMul_6"),
         helper.make_node("Add", ["mm", "b"], ["lin"], name="node_linear")],
        "g", [vi("x", [2, 3, 4])], [vi("lin", [2, 3, 4])])
    # ORT: the 3-d input flattened for a Gemm (a helper node named after nothing original)
    optimized = helper.make_graph(
        [helper.make_node("LayerNormalization", ["x", "s"], ["ln"], name="node_layer_norm"),
         helper.make_node("Reshape", ["ln", "shape"], ["flat"], name="gemm_input_reshape_token_3"),
         helper.make_node("Gemm", ["flat", "w", "b"], ["g"], name="node_MatMul_6/MatMulAddFusion"),
         helper.make_node("Reshape", ["g", "shape3"], ["lin"], name="gemm_output_reshape_token_4")],
        "g", [vi("x", [2, 3, 4])], [vi("lin", [2, 3, 4])])
    ln = {"module": "blk/ln", "framework_op": "aten::layer_norm", "call": "layer_norm#0"}
    fc = {"module": "blk/fc", "framework_op": "aten::linear", "call": "linear#0"}
    out = scopes_of_optimized(original, optimized, {"node_layer_norm": ln, "node_MatMul_6": fc, "node_linear": fc})
    assert out["gemm_input_reshape_token_3"]["call"] == "linear#0"  # the Gemm's work, not the layer norm's
    assert out["gemm_input_reshape_token_3"]["module"] == out["gemm_output_reshape_token_4"]["module"] == "blk/fc"


# ---------------------------------------------------------------- inductor kernels of several calls

class _Act(torch.nn.Module):
    def forward(self, x):
        return torch.tanh(x) * 0.5


class _Block(torch.nn.Module):
    """A dense layer, a bias-like add in the block's own forward, then a child's tanh and mul:
    inductor fuses the add, tanh and mul (and the dense layer's output view) into one kernel."""

    def __init__(self):
        super().__init__()
        self.fc, self.act = torch.nn.Linear(16, 16), _Act()

    def forward(self, x):
        return self.act(self.fc(x) + 1.0)


def test_an_inductor_kernel_lists_the_op_calls_of_its_nodes_by_estimated_cost():
    from porter.targets.inductor_attribution import region_calls
    from tests.analysis.test_call_identity import compiled_records

    records = compiled_records(_Block().eval(), torch.randn(2, 4, 16))
    calls = {c.callee: c for c in region_calls(records)}
    (fused,) = [c for name, c in calls.items() if name.startswith("cpp_fused")]
    # three elementwise calls over one 2x4x16 output, each its output elements times its op's cost
    # per element (a tanh is not an add: porter.core.elementcost); the add written in the root
    # forward counts there, tanh and mul in the child; the dense layer's output view (its linear
    # call) is indexing inside the kernel and takes nothing
    got = json.loads(fused.call_members)
    assert [m[:2] for m in got] == [["act", "tanh#0"], ["", "add#0"], ["act", "mul#0"], ["fc", "linear#0"]]
    w = element_weight("aten::tanh")
    assert w > element_weight("aten::add") == element_weight("aten::mul") == 1.0
    assert [m[2] for m in got] == pytest.approx([w / (w + 2), 1 / (w + 2), 1 / (w + 2), 0.0], rel=1e-6, abs=1e-12)
    assert calls["aten::addmm"].call == "linear#0" and calls["aten::addmm"].call_members == ""  # one call
    # BERT's intermediate: a dense layer, then its sibling's GELU. The kernel computes the GELU and
    # reads the dense layer's output through a view, which does no work: the kernel is the GELU's
    # module and call (it was their parent's, with no call, while views counted), and its call
    # members give the GELU's call all of it
    dense = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.GELU()).eval()
    (fused,) = [c for c in region_calls(compiled_records(dense, torch.randn(2, 4, 16))) if c.callee.startswith("cpp_fused")]
    assert (fused.module, fused.call) == ("1", "gelu#0")
    # ops.members, the module split: nothing to split, the view's module does no work in the
    # kernel (costed by its output size, c_fc took 11% of GPT-2's GELU kernel)
    assert fused.members == ""
    assert json.loads(fused.call_members) == [["1", "gelu#0", 1.0], ["0", "linear#0", 0.0]]


@pytest.fixture(scope="module")
def gpt2_inductor(source_bundles, tmp_path_factory):
    """gpt2_small cpu -> cpu:inductor, captured once for the tests below (one intra-op thread, as
    tests/e2e/test_live_identity.py: inductor's OpenMP waits on a shared machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        src = source_bundles("gpt2_small")
        dest = tmp_path_factory.mktemp("ind") / "gpt2_small"
        capture(f"{LIBRARY}:gpt2_small", "cpu:inductor", dest, LIVE_OPTS)
    finally:
        torch.set_num_threads(threads)
    return analyse(src, load_bundle(dest))


GPT2_ACT = "model/transformer/h/0/mlp/act"  # NewGELUActivation: eight eager calls (mul, pow, add, tanh)


@pytest.mark.slow
def test_inductor_gelu_kernel_is_split_among_its_eager_calls(gpt2_inductor):
    al = gpt2_inductor.alignment
    ops, times = al.target_ops, al.target_times
    own = ops[(ops["call_members"] != "") & ~ops["name"].str.contains("[share of", regex=False)]
    # the calls that carry cost (a view's call, the dense layer's output view in the kernel, carries none)
    members = own.set_index("op_id")["call_members"].map(lambda s: [x for x in json.loads(s) if x[2] > 0])
    gelu = [i for i, m in members.items() if {x[0] for x in m} == {GPT2_ACT}]
    assert gelu, "no inductor kernel holds the GELU's calls"
    calls = al.op_calls
    act = calls[calls["module"] == GPT2_ACT].set_index(["op", "call"])
    # the kernel names exactly the calls the eager side ran in that module (its profiler tree)
    eager = {k for k, r in act.iterrows() if r["source_us"] > 0}
    assert len(eager) == 8
    for i in gelu:
        assert {(x[1].rpartition("#")[0], int(x[1].rpartition("#")[2])) for x in members[i]} == eager
    assert (act.loc[sorted(eager), "estimated_us"] > 0).all() and (act.loc[sorted(eager), "target_us"] > 0).all()
    # conservation: each kernel's charged time (its own row and split_fused's module shares) is
    # the sum of its calls' parts; and the module's call rows hold all the kernels' time per step
    shares = fused_call_shares(ops, times)
    steps = ops.loc[ops["step"] >= 0, "step"].nunique()
    whole = 0.0
    for i in gelu:
        mine = shares[shares["op_id"] == i]
        charged = times.values.reindex(mine["fused_ids"].iloc[0]).sum()
        assert charged > 0 and mine["us"].sum() == pytest.approx(charged, rel=REL)
        whole += charged
    assert act["target_us"].sum() == pytest.approx(whole / steps, rel=REL)
    assert act["estimated_us"].sum() == pytest.approx(whole / steps, rel=REL)


@pytest.mark.slow
def test_report_shows_the_estimated_part_of_each_call(gpt2_inductor):
    import dataclasses

    import orjson

    from porter.pipeline.diagnose import to_json
    from reports.build import model_from_diagnosis
    from reports.render import render

    m = model_from_diagnosis(orjson.loads(orjson.dumps(to_json(gpt2_inductor))))
    row = next(r for r in m.op_calls if r.module == GPT2_ACT and r.op == "tanh")
    assert 0 < row.estimated_us == pytest.approx(row.target_us)
    # the md lists the largest gaps only: render the GELU module's calls (the model's real rows)
    m = dataclasses.replace(m, op_calls=[r for r in m.op_calls if r.module == GPT2_ACT])
    md = render(m, "report.md.j2")
    section = md.split("### By op call", 1)[1].split("\n### ", 1)[0]
    assert "| Estimated |" in section
    line = next(x for x in section.splitlines() if x.startswith(f"| `{GPT2_ACT}` | `tanh#0`"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[5] and cells[5] == cells[4]  # all of the tanh call's target time is its estimated share
    html = render(m, "report.html.j2")
    assert "the part placed by estimate\">Estimated</th>" in html
    cell = f'<td class="num" data-v="{row.estimated_us!r}">{cells[5]}</td>'
    assert html.count(cell) >= 2  # the tanh call's Target and Estimated cells (same value)
