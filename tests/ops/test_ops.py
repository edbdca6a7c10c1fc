"""`porter ops`: the portability matrix. Fast tests cover the data, costs, diff, rendering,
registry predictions and bad input; slow ones run real ops on inductor, torchax/XLA and ORT."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from porter.analysis.fixes import load_catalogue
from porter.core.errors import PorterError
from porter.ops.cost import gap_cost
from porter.ops.diff import diff_matrices
from porter.ops.inventory import ExportFailure, Variant, export_model, inventory
from porter.ops.matrix import Cell, Matrix, OpRow, StackInfo, Verdict, read_matrix

ROOT = Path(__file__).resolve().parents[2]
STATUS_MODEL = f"{ROOT}/tests/models/op_statuses.py:one_of_each"
A = torch.ops.aten


def porter_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PORTER_TIMING_BUDGET_S": os.environ.get("PORTER_TIMING_BUDGET_S", "3")}  # as run_porter's
    return subprocess.run([sys.executable, "-m", "porter", *args], capture_output=True, text=True,
                          cwd=cwd or ROOT, timeout=900, env=env)


def small_matrix(status: str = "host_fallback", torch_version: str = "2.13") -> Matrix:
    row = OpRow("aten.sort.default", ["float32"], "2d", 3, ["blocks/0"], [],
                {"cpu:inductor": Cell(Verdict("native", "lowering registered"), Verdict(status, "generated code calls aten.sort.stable"),
                                      None, None, gap_cost(status, False, load_catalogue()))})
    ok = OpRow("aten.add.Tensor", ["float32", "float32"], "2d,2d", 1, [""], [],
               {"cpu:inductor": Cell(Verdict("native"), Verdict("native"), 0.0, 1e-4)})
    return Matrix("m", "model", [StackInfo("cpu:inductor", True), StackInfo("cuda:inductor", False, "not available: no CUDA")],
                  [row, ok], {"torch": torch_version}, "2026-12-01 12:00 UTC", 1.0)


def test_matrix_round_trips_through_json_and_counts_agreement(tmp_path):
    m = small_matrix()
    back = read_matrix(m.write(tmp_path / "ops.json"))
    assert back.to_json() == m.to_json()
    assert back.agreement("cpu:inductor") == (1, 2)  # sort: predicted native, confirmed fallback
    assert back.counts("cpu:inductor")["host_fallback"] == 1
    assert back.rows[0].cells["cpu:inductor"].cost.fix_id == "write-lowering"


def test_read_matrix_bad_input_is_one_line(tmp_path):
    (tmp_path / "x.json").write_text("{not json")
    with pytest.raises(PorterError, match="not JSON"):
        read_matrix(tmp_path / "x.json")
    (tmp_path / "y.json").write_text(json.dumps({"schema_version": 99, "rows": []}))
    with pytest.raises(PorterError, match="schema_version"):
        read_matrix(tmp_path / "y.json")


def test_gap_costs_come_from_the_catalogue():
    cat = load_catalogue()
    assert gap_cost("native", False, cat) is None and gap_cost("decomposed", True, cat) is None
    assert gap_cost("host_fallback", True, cat).fix_id == "register-decomposition"
    assert gap_cost("unsupported", True, cat).fix_id == "register-decomposition"
    assert gap_cost("host_fallback", False, cat).fix_id == "write-lowering"
    c = gap_cost("unsupported", False, cat)
    assert (c.fix_id, c.tier, c.days) == ("write-kernel", "L", (5.0, 15.0))
    assert gap_cost("numerics_mismatch", False, cat).fix_id == "accept-dtype-change"


def test_diff_reports_better_worse_and_versions():
    a, b = small_matrix("host_fallback", "2.12"), small_matrix("native", "2.13")
    (change,) = diff_matrices(a, b)
    assert (change.key, change.before, change.after, change.direction) == (
        "aten.sort.default[float32|2d]", "host_fallback", "native", "better")
    (back,) = diff_matrices(b, a)
    assert back.direction == "worse"
    b.rows.pop(0)
    (gone,) = diff_matrices(a, b)
    assert (gone.after, gone.direction) == ("absent", "removed")


def test_ops_pages_render_matrix_costs_and_unavailable_stacks(tmp_path):
    from reports.ops_page import write_ops_pages

    html, md = write_ops_pages(small_matrix().to_json(), tmp_path)
    text = html.read_text()
    assert 'class="host_fallback disagree"' in text and "predicted native" in text
    assert "not available: no CUDA" in text and "<script>" in text and "http" not in text.split("<body>")[1]
    mdt = md.read_text()
    assert "| cpu:inductor | 1 | 0 | 1 | 0 | 0 | 1/2 |" in mdt
    assert "Write a lowering for the op that falls back to the eager kernel [M, 2\u20135 d]" in mdt


def _variant(op, *args, **kwargs) -> Variant:
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    return Variant(op, [str(t.dtype) for t in tensors], "2d", args, kwargs)


def test_inductor_and_torchax_registries_predict():
    from porter.ops.predict import predict_inductor, predict_xla

    x = torch.randn(4, 8)
    assert predict_inductor(_variant(A.nonzero.default, x > 0)).status == "host_fallback"  # make_fallback
    assert predict_inductor(_variant(A.topk.default, x, 3)).status == "native"  # a lowering is registered
    hs = predict_inductor(_variant(A.hardswish.default, x))
    assert hs.status == "decomposed" and "aten.clamp_min.default" in hs.ops
    assert predict_xla(_variant(A.nonzero.default, x > 0)).status == "native"  # the registry says so
    assert predict_xla(_variant(A.gelu.default, x)).evidence.startswith("torchax op registry")


def test_inventory_records_ops_dtypes_shapes_and_modules():
    from porter.capture.models import load_model

    spec = load_model("mlp")
    variants = inventory(spec.module, spec.example_inputs, spec.name)
    by_name = {v.name: v for v in variants}
    assert set(by_name) == {"aten.linear.default", "aten.gelu.default"}
    lin = by_name["aten.linear.default"]
    assert lin.dtypes == ["float32"] * 3 and lin.shape_class == "2d,2d,1d" and lin.calls == 3
    assert lin.modules == ["0", "2", "4"]
    assert torch.equal(lin.args[0], spec.example_inputs[0])  # the recorded input is the real one


def test_export_failure_names_reason_and_graph_break():
    sys.path.insert(0, str(ROOT / "tests" / "models"))
    from op_statuses import data_dependent_branch

    module, inputs = data_dependent_branch()
    with pytest.raises(ExportFailure) as info:
        export_model(module, inputs, "branchy")
    text = info.value.one_line()
    assert "torch.export cannot capture model branchy" in text
    assert "data-dependent" in text.lower() or "guard" in text.lower()
    assert "op_statuses.py" in text  # the line of the model where the graph broke


def test_cli_bad_inputs_exit_2_with_one_line(tmp_path):
    r = porter_cli("ops", f"{ROOT}/tests/models/op_statuses.py:data_dependent_branch", "--on", "xla", "-o", str(tmp_path))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "torch.export cannot capture model data_dependent_branch" in r.stderr
    r = porter_cli("ops", "mlp", "--on", "cpu:nosuch", "-o", str(tmp_path))
    assert r.returncode == 2 and "unknown stack" in r.stderr and "Traceback" not in r.stderr
    r = porter_cli("ops", "diff", str(tmp_path / "missing.json"))
    assert r.returncode == 2 and "two ops.json" in r.stderr


@pytest.mark.slow
def test_one_op_per_status_on_three_stacks(tmp_path):
    """The planted model: every stack's status per op, and where prediction and run disagree."""
    r = porter_cli("ops", STATUS_MODEL, "--on", "xla", "--on", "cpu:inductor", "--on", "cpu:ort",
                   "--on", "cuda:inductor", "-o", str(tmp_path))
    assert r.returncode == 0, r.stderr[-2000:]
    m = read_matrix(tmp_path / "ops.json")
    got = {(row.op, t): (c.predicted.status, c.status) for row in m.rows for t, c in row.cells.items()}
    expect = {
        ("aten.nonzero.default", "xla"): ("native", "unsupported"),  # registered, but jit needs static shapes
        ("aten.nonzero.default", "cpu:inductor"): ("host_fallback", "host_fallback"),
        ("aten.topk.default", "cpu:inductor"): ("native", "host_fallback"),  # lowering registered, code calls aten
        ("porter_test.softsign_host.default", "cpu:inductor"): ("host_fallback", "host_fallback"),
        ("porter_test.softsign_host.default", "xla"): ("unsupported", "unsupported"),
        ("porter_test.softsign_host.default", "cpu:ort"): ("unsupported", "unsupported"),
        ("aten.hardswish.default", "cpu:inductor"): ("decomposed", "decomposed"),
        ("aten.hardswish.default", "xla"): ("decomposed", "decomposed"),
        ("aten.hardswish.default", "cpu:ort"): ("decomposed", "decomposed"),  # ONNX function, inlined by ORT
        ("porter_test.fast_exp.default", "cpu:inductor"): ("decomposed", "numerics_mismatch"),
        ("aten.gt.Scalar", "cpu:ort"): ("native", "native"),
    }
    assert {k: got[k] for k in expect} == expect
    fast_exp = next(r for r in m.rows if r.op == "porter_test.fast_exp.default").cells["cpu:inductor"]
    assert fast_exp.max_rel_l2 > 1e-3 and fast_exp.cost.fix_id == "accept-dtype-change"
    assert "rel_l2 vs fp64" in fast_exp.confirmed.evidence
    topk = next(r for r in m.rows if r.op == "aten.topk.default").cells["cpu:inductor"]
    assert "aten.topk.default" in topk.confirmed.evidence and topk.cost.fix_id == "write-lowering"
    assert m.agreement("xla") == (sum(1 for r in m.rows if "xla" in r.cells) - 1, sum(1 for r in m.rows if "xla" in r.cells))
    cuda = next(s for s in m.stacks if s.target == "cuda:inductor")
    assert not cuda.available and cuda.why.startswith("not available: no CUDA device")
    assert "prediction = confirmation for" in r.stdout and "cuda:inductor: not available" in r.stdout
    assert (tmp_path / "ops.html").is_file() and (tmp_path / "ops.md").is_file()
    # a second matrix with one stack fewer: the diff names what went away
    m.rows[0].cells.pop("xla")
    m.write(tmp_path / "b.json")
    d = porter_cli("ops", "diff", str(tmp_path / "ops.json"), str(tmp_path / "b.json"))
    assert d.returncode == 0 and "removed" in d.stdout


# inductor compiles (and g++ builds) every op alone: seconds each, so the transformer runs on xla only
@pytest.mark.slow
@pytest.mark.parametrize("model,targets", [("transformer", ["xla"]), ("cnn", ["xla", "cpu:inductor"]),
                                           ("mlp", ["xla", "cpu:inductor"])])
def test_builtin_models_run_natively(model, targets):
    """The built-ins use only well-supported ops: nothing unsupported or mismatched on xla and
    inductor, every cell confirmed, and the registries agree with the runs."""
    from porter.ops.build import ops_for_model

    m = ops_for_model(model, targets)
    for row in m.rows:
        for target, cell in row.cells.items():
            assert cell.confirmed is not None
            assert cell.status in ("native", "decomposed"), (row.key, target, cell.confirmed)
            assert cell.max_rel_l2 is None or cell.max_rel_l2 <= cell.tolerance
    for target in targets:
        agree, judged = m.agreement(target)
        assert judged == len(m.rows) and agree == judged


def _bert():
    from transformers import BertConfig, BertModel

    cfg = BertConfig(vocab_size=128, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=32)
    torch.manual_seed(0)
    return BertModel(cfg).eval(), (torch.randint(0, 128, (2, 8)),)


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=128, n_embd=32, n_layer=1, n_head=2, n_positions=32, use_cache=False,
                     bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    return GPT2LMHeadModel(cfg).eval(), (torch.randint(0, 128, (2, 8)),)


@pytest.mark.slow
@pytest.mark.parametrize("factory,targets", [(_bert, ["xla", "cpu:inductor"]), (_gpt2, ["xla"])], ids=["bert", "gpt2"])
def test_transformers_models_from_config(factory, targets):
    pytest.importorskip("transformers")
    from porter.ops.build import build_matrix

    module, inputs = factory()
    variants = inventory(module, inputs, factory.__name__)
    m = build_matrix(factory.__name__, variants, targets)
    names = {r.op for r in m.rows}
    assert "aten.embedding.default" in names and "aten.layer_norm.default" in names
    for row in m.rows:
        for target, cell in row.cells.items():
            assert cell.confirmed is not None, (row.key, target)
            assert cell.status != "numerics_mismatch", (row.key, target, cell.confirmed.evidence)
    assert any(r.modules and r.modules[0].startswith(("encoder/", "transformer/")) for r in m.rows)


@pytest.mark.slow
def test_diagnose_with_ops_flags_the_fallback_in_portability_and_fix_plan(tmp_path):
    """topk falls back to the eager kernel in inductor's CPU code: the diagnosis flags it in the
    op table (groups), the fix plan and the report's Portability section."""
    r = porter_cli("diagnose", f"{ROOT}/tests/models/op_statuses.py:topk_head", "--from", "cpu", "--to", "cpu:inductor",
                   "--ops", "--steps", "1", "--repeats", "3", "--confirm", "0", "-o", str(tmp_path))
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads((tmp_path / "diagnosis.json").read_text())
    (flag,) = d["portability"]["flagged"]
    assert (flag["op"], flag["status"], flag["predicted"], flag["fix_id"]) == (
        "aten.topk.default", "host_fallback", "native", "write-lowering")
    assert 0 < flag["time_share"] < 1
    assert any(f["fix_id"] == "write-lowering" and f["ops"] == ["aten.topk.default"] for f in d["fixes"])
    assert [g["portability"] for g in d["groups"] if g.get("portability")] == ["host_fallback"]
    md = (tmp_path / "report.md").read_text()
    section = md.split("## 5 Portability")[1].split("## 6")[0]
    assert "`aten.topk.default` | host_fallback (predicted native)" in section
    assert "Write a lowering for the op that falls back to the eager kernel" in md.split("## 5 Portability")[0]
    html = (tmp_path / "report.html").read_text()
    assert 'id="t-portability"' in html
    # flagged on its module's group, named by the flagged op: "op → aten::topk [host_fallback on target]" when
    # topk is the target group's heaviest op by timing, else "op → top [aten::topk: host_fallback on target]"
    labels = re.findall(r'<td class="name">([^<]*host_fallback on target\])</td>', html.replace("<wbr>", ""))
    assert labels and all("aten::topk" in label for label in labels), labels


def test_ort_kernel_registry_predicts_from_exported_nodes():
    from porter.ops.predict import predict_ort

    cpu = "CPUExecutionProvider"
    assert predict_ort([("", "Gemm", "tensor(float)")], 20, cpu).status == "native"
    two = predict_ort([("", "NonZero", "tensor(bool)"), ("", "Transpose", "tensor(int64)")], 20, cpu)
    assert (two.status, two.ops) == ("decomposed", ["NonZero", "Transpose"])
    hs = predict_ort([("", "HardSwish", "tensor(float)")], 20, cpu)  # an ONNX function ORT inlines
    assert hs.status == "decomposed" and "inlines" in hs.evidence
    assert predict_ort([("", "Gemm", "tensor(float)")], 3, cpu).status == "unsupported"  # opset before Gemm's kernels
    assert predict_ort([("custom", "Nope", None)], 20, cpu).status == "unsupported"


def test_core_aten_first_calls_keep_inputs_the_op_accepted():
    from porter.ops.coreaten import _FirstCalls, core_aten_ops

    core = core_aten_ops()
    assert A.add.Tensor in core and A.convolution.default in core and A.linear.default not in core
    rec = _FirstCalls({A.add.Tensor, A.bitwise_and.Tensor})
    x = torch.ones(2, 3)
    with rec:
        torch.add(x, 2 * x)
        torch.add(x, x)  # only the first call is kept
        with pytest.raises(RuntimeError):
            torch.bitwise_and(x, x)  # rejected for float: not kept
    (args, kwargs), = rec.calls.values()
    assert list(rec.calls) == [A.add.Tensor] and torch.equal(args[1], 2 * x)
