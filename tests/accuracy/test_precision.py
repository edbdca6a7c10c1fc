"""Precision ports (issue 13, item 4): the target runs another dtype than the source.

Tolerances follow the coarser dtype (porter.analysis.accuracy.TOLERANCES: bf16 3e-2, ~8 unit
roundoffs, since u = 2^-8 = 3.9e-3), and each module and named op is judged against float64
and against what its dtype implies: the same computation done exactly on values rounded to
the dtype (leaf outputs rounded too). Bound: 3 x that error + tolerance/10 (torch._dynamo's
low-precision multiplier). A well-formulated model in bf16 stays within it; the planted
one-pass variance of a shifted input (tests/models/planted.py) does not, and its op is named.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conftest import REPO, run_porter
from porter.accuracy.precision import module_verdict, op_verdict
from porter.capture.precision import cast_model, parse_dtype
from porter.core.errors import PorterError

PLANTED = REPO / "tests" / "models" / "planted.py"
HF = REPO / "tests" / "models" / "hf.py"


def test_dtype_names_and_a_one_line_error_for_others():
    assert [parse_dtype(x) for x in ("bf16", "bfloat16", "torch.float16", "half", "float32", "double")] == \
        ["bf16", "bf16", "fp16", "fp16", "fp32", "fp64"]
    with pytest.raises(PorterError, match="--dtype 'int8' is not a dtype porter runs"):
        parse_dtype("int8")


def test_cast_model_leaves_the_source_untouched_and_keeps_the_fingerprint():
    from porter.capture.models import load_model

    spec = load_model(f"{PLANTED}:clean")
    cast = cast_model(spec, "bf16")
    assert cast.dtype == torch.bfloat16 and cast.fingerprint == spec.fingerprint
    assert all(p.dtype == torch.bfloat16 for p in cast.module.parameters())
    assert all(p.dtype == torch.float32 for p in spec.module.parameters())
    assert cast.example_inputs[0].dtype == torch.bfloat16 and spec.example_inputs[0].dtype == torch.float32


@pytest.mark.parametrize("args", [
    ("diagnose", f"{PLANTED}:clean", "--from", "cpu", "--to", "xla", "--dtype", "fp64"),
    ("capture", f"{PLANTED}:clean", "--on", "cpu:ort", "--autocast", "bf16"),
])
def test_a_dtype_the_stack_does_not_run_is_a_one_line_error(args, tmp_path):
    r = run_porter(*args, "-o", str(tmp_path / "out"), timeout=300)
    assert r.returncode == 2, (r.stdout, r.stderr)
    text = r.stderr.strip()
    assert len(text.splitlines()) == 1 and "Traceback" not in text, text
    assert "--dtype" in text or "--autocast" in text
    assert not (tmp_path / "out").exists()  # refused before anything was captured


@pytest.mark.parametrize("target, dtype, autocast, says", [
    ("cpu:ort", "bf16", "", "does not run --dtype bf16"),
    ("cpu", "int4", "", "--dtype 'int4' is not a dtype porter runs"),
    ("xla", "", "bf16", "does not run --autocast"),
    ("cpu", "", "fp64", "autocast lowers precision to bf16 or fp16 only"),
    ("cpu", "bf16", "bf16", "give one"),
])
def test_precision_options_are_checked_before_any_capture(target, dtype, autocast, says, tmp_path):
    from porter.pipeline.diagnose import diagnose_specs

    with pytest.raises(PorterError, match=says) as err:
        diagnose_specs("cpu", target, tmp_path / "out", model=f"{PLANTED}:clean", target_dtype=dtype,
                       target_autocast=autocast)
    assert type(err.value).exit_code == 2 and "\n" not in err.value.one_line()
    assert not (tmp_path / "out").exists()


def test_capture_refuses_a_dtype_its_stack_does_not_run(tmp_path):
    from porter.capture.options import CaptureOptions
    from porter.capture.run import capture

    with pytest.raises(PorterError, match="target cpu:ort does not run --dtype fp16"):
        capture(f"{PLANTED}:clean", "cpu:ort", tmp_path / "b", CaptureOptions(dtype="fp16"))
    assert not (tmp_path / "b").exists()


def _norm_pair(fragile: bool):
    import importlib.util

    spec = importlib.util.spec_from_file_location("planted_for_precision", PLANTED)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.Norm(fragile).eval()


@pytest.mark.parametrize("fragile", [False, True])
def test_module_verdict_tells_a_fragile_formulation_from_bf16_rounding(fragile):
    norm = _norm_pair(fragile)
    x = torch.randn(4, 16, 128, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        source = norm(x)
        target = norm(x.to(torch.bfloat16))  # the module run in bf16, as the target does
    v = module_verdict(norm, (x,), {}, source, target, "bf16")
    assert v is not None and v.closer == "source"
    if fragile:  # E[x^2] ~ 9e4 in bf16 keeps steps of 512 against a variance of ~1
        assert not v.within and v.target_error > 100 * v.bound
    else:  # two-pass LayerNorm: about the rounding of input and output (~u / sqrt(3) each)
        assert v.within and v.target_error < 2e-2 and v.implied_error > 1e-3


def test_op_verdict_separates_the_dtype_from_a_worse_kernel():
    a = torch.full((64,), 9.0e4) + torch.rand(64, generator=torch.Generator().manual_seed(0))
    b = a - torch.rand(64, generator=torch.Generator().manual_seed(1))
    op = torch.ops.aten.sub.Tensor
    bf16 = op(a.to(torch.bfloat16), b.to(torch.bfloat16))
    v = op_verdict(op, (a, b), {}, op(a, b), bf16, "bf16")
    assert v.within  # the operands rounded to bf16 already lose the difference: what bf16 implies
    x = torch.randn(256, generator=torch.Generator().manual_seed(2))
    exp = torch.ops.aten.exp.default
    coarse = exp(x.to(torch.float8_e4m3fn).to(torch.float32)).to(torch.bfloat16)  # a kernel below bf16
    v2 = op_verdict(exp, (x,), {}, exp(x), coarse, "bf16")
    assert not v2.within and v2.closer == "source"


def _live(model: str, target: str, dtype: str, out: Path, autocast: str = "", report: bool = False) -> dict:
    from porter.capture.options import CaptureOptions
    from porter.pipeline.diagnose import diagnose_specs

    diagnose_specs("cpu", target, out, model=model, capture_options=CaptureOptions(steps=1, warmup=0, repeats=2),
                   report=report, target_dtype=dtype, target_autocast=autocast)
    return json.loads((out / "diagnosis.json").read_text())


@pytest.mark.slow
def test_bert_in_bf16_on_xla_loses_only_what_bf16_implies(tmp_path):
    d = _live(f"{HF}:bert_small", "xla", "bf16", tmp_path)
    acc = d["accuracy"]
    assert acc["dtype"] == "bf16" and acc["tolerance"] == 3e-2
    p = acc["precision"]
    assert (p["source_dtype"], p["target_dtype"], p["judged"]) == ("fp32", "bf16", True)
    assert p["beyond_dtype"] == [] and p["more_than_dtype"] == [] and p["no_verdict"] == {}
    judged = [r for r in acc["modules"] if r["dtype_verdict"] is not None]
    assert len(judged) == acc["modules_compared"]  # every compared module, and the model output
    assert all(r["fp64_target_rel_l2"] <= r["dtype_bound"] for r in judged)
    assert all(r["closer_to_fp64"] == "source" for r in judged if r["fp64_target_rel_l2"] > 0)
    assert any(f.startswith("no module loses more than bf16 implies") for f in acc["findings"])
    assert not [r for r in acc["modules"] if r["introduces_error"]]


@pytest.mark.slow
def test_planted_fragile_norm_in_bf16_is_flagged_beyond_the_dtype_and_its_op_named(tmp_path):
    acc = _live(f"{PLANTED}:early", "xla", "bf16", tmp_path)["accuracy"]
    module = "blocks/0/pre_norm"
    assert acc["precision"]["beyond_dtype"] == [module]
    row = next(r for r in acc["modules"] if r["module"] == module)
    assert row["dtype_verdict"] == "more" and row["closer_to_fp64"] == "source"
    assert row["fp64_target_rel_l2"] > 100 * row["dtype_bound"]
    op = acc["ops"][module]
    assert op["op"] == "aten.sub.Tensor"  # E[x^2] - E[x]^2
    assert op["dtype_verdict"] == "implied"  # the subtraction is as exact as bf16 allows: the formulation is at fault
    assert "formulation" in op["verdict"]
    assert any(f.startswith(f"{module}: MORE than bf16 implies") and "aten.sub.Tensor" in f for f in acc["findings"])


@pytest.mark.slow
def test_the_fp64_oracle_picks_the_target_when_it_is_the_more_exact_side(tmp_path):
    """Source fp32, target fp64: the fragile norm loses ~1e-2 in fp32 and nothing in fp64; the
    port's tolerance is fp32's, and the oracle says the target is closer to the truth."""
    acc = _live(f"{PLANTED}:early", "cpu", "fp64", tmp_path)["accuracy"]
    assert acc["dtype"] == "fp32" and acc["precision"]["target_dtype"] == "fp64"
    row = next(r for r in acc["modules"] if r["module"] == "blocks/0/pre_norm")
    assert row["introduces_error"] and row["closer_to_fp64"] == "target"
    assert row["fp64_target_rel_l2"] < 1e-12 < 1e-4 < row["fp64_source_rel_l2"]
    assert acc["precision"]["beyond_dtype"] == []


@pytest.mark.slow
def test_inductor_in_fp16_flags_the_fragile_norm_in_the_last_layer(tmp_path):
    """cpu:inductor --dtype fp16 (tolerance 5e-3, ~10u): the one-pass norm loses more than fp16
    storage implies even where inductor computes it in float32; its op is a subtraction that
    fp16 cannot hold apart (as exact as fp16 allows: the formulation is at fault)."""
    acc = _live(f"{PLANTED}:last_short", "cpu:inductor", "fp16", tmp_path)["accuracy"]
    assert acc["dtype"] == "fp16" and acc["tolerance"] == 5e-3
    assert acc["precision"]["beyond_dtype"] == ["head_norm"]
    assert acc["local"]["not_run"] == {}
    op = acc["ops"]["head_norm"]
    assert op["op"] == "aten.sub.Tensor" and op["dtype_verdict"] == "implied"


@pytest.mark.slow
def test_autocast_port_finds_the_norm_fed_bf16_and_says_so_in_summary_and_report(tmp_path):
    """--autocast bf16 on eager CPU: weights stay float32, the linear layers hand the norm bf16,
    so the local run feeds it bf16 too (the dtypes an autocast forward hands each module)."""
    from reports.terminal import summary_lines

    d = _live(f"{PLANTED}:early", "cpu", "", tmp_path, autocast="bf16", report=True)
    acc = d["accuracy"]
    p = acc["precision"]
    assert (p["autocast"], p["source_dtype"], p["target_dtype"], acc["dtype"]) == ("bf16", "fp32", "bf16", "bf16")
    assert p["beyond_dtype"] == ["blocks/0/pre_norm"] and acc["local"]["not_run"] == {}
    assert acc["ops"]["blocks/0/pre_norm"]["op"] == "aten.sub.Tensor"
    text = "\n".join(summary_lines(d, width=100))
    assert "accuracy (fp32 → bf16, tolerances of bf16" in text and "under torch.autocast to bf16" in text
    report = (tmp_path / "report.md").read_text()
    assert "Precision port: the source ran fp32, the target bf16" in report
    assert "Losing more than bf16 implies: blocks/0/pre_norm." in report


@pytest.mark.slow
def test_bundles_captured_apart_in_bf16_judge_the_suspect_from_its_saved_call(tmp_path):
    """porter capture on each side (the target with --dtype bf16): the sketches name the suspect
    and the capture command (with --dtype); with its full call saved on both, the suspect is
    judged beyond bf16 and its op named."""
    from porter.capture.options import CaptureOptions
    from porter.capture.run import capture
    from porter.pipeline.diagnose import diagnose_specs

    model, module = f"{PLANTED}:early", "blocks/0/pre_norm"
    quick = dict(steps=1, warmup=0, repeats=2)
    for tag, mods in (("sketch", ()), ("full", (module,))):
        capture(model, "cpu", tmp_path / f"src_{tag}", CaptureOptions(full_modules=mods, **quick))
        tgt = capture(model, "xla", tmp_path / f"tgt_{tag}", CaptureOptions(full_modules=mods, dtype="bf16", **quick))
        assert tgt.manifest["precision"]["dtype"] == "bf16" and tgt.manifest["model"]["dtype"] == "bfloat16"
        diagnose_specs(str(tmp_path / f"src_{tag}"), str(tmp_path / f"tgt_{tag}"), tmp_path / f"d_{tag}", model=model,
                       report=False)
    sketched = json.loads((tmp_path / "d_sketch" / "diagnosis.json").read_text())["accuracy"]
    assert sketched["suspects"] == [module] and sketched["precision"]["judged_modules"] == 0
    assert any(f"--modules {module} and the same --on xla --dtype bf16" in f for f in sketched["findings"])
    acc = json.loads((tmp_path / "d_full" / "diagnosis.json").read_text())["accuracy"]
    assert acc["precision"]["beyond_dtype"] == [module] and acc["local"]["not_run"] == {}
    assert acc["ops"][module]["op"] == "aten.sub.Tensor" and acc["ops"][module]["dtype_verdict"] == "implied"
