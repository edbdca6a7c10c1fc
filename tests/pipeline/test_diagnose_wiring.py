"""diagnose with the perf model, the fix catalogue and accuracy wired in.

Trace mode on real CPU and corpus traces (roofline, fixes, --catalogue), live mode on real
captures (accuracy per module, the fp64 oracle, a planted accuracy gap).
"""

from __future__ import annotations

import gzip
import json
import math
import tomllib
from pathlib import Path

import pandas as pd
import pytest
import torch

from _diagnoses import diagnose as diagnose_cli
from _diagnoses import live_transformer_diagnosis, qwen_trace_diagnosis
from conftest import FIXTURES, REPO, run_porter
from porter.bundles.bundle import load_bundle
from porter.core.errors import PorterError
from porter.pipeline.diagnose import analyse
from porter.pipeline.diagnose import diagnose_specs as diagnose
from porter.pipeline.inputs import InputKind, classify
from porter.analysis.fixes import FUSED_ATTENTION, load_catalogue
from porter.analysis.fixrank import rank_fixes
from porter.capture.models import load_model

PLANTED = f"{REPO / 'tests' / 'models' / 'fragile.py'}:model"


# ---------------------------------------------------------------- costs and roofline (trace mode)

def test_matmul_flops_count_each_gemm_once(tmp_path):
    """aten::linear wraps aten::addmm and both carry a cost: a group's FLOPs count the GEMM once.

    Expected: 2*M*K*N per aten::addmm event, from the raw trace's Input Dims with plain json.
    """
    trace = FIXTURES / "cpu_mlp.json.gz"
    events = json.load(gzip.open(trace))["traceEvents"]
    want = 0.0
    for e in events:
        if e.get("name") == "aten::addmm" and e.get("cat") == "cpu_op" and e["args"].get("Input Dims"):
            (m, k), (_, n) = e["args"]["Input Dims"][1], e["args"]["Input Dims"][2]
            want += 2.0 * m * k * n
    assert want > 0
    _, dest = diagnose(trace, trace, tmp_path, report=False)
    j = json.loads(dest.read_text())
    cls = {g["group_id"]: g["op_class"] for g in j["groups"]}
    got = sum(r["flops"] for r in j["roofline"]["groups"] if cls[r["group_id"]] == "matmul" and r["flops"])
    assert got == pytest.approx(want)
    # no device name in a CPU trace: no ceilings, no roofline, nothing claimed beyond the source's time
    assert j["roofline"]["ceilings"]["target"]["known"] is False
    for g, r in zip(j["groups"], j["roofline"]["groups"]):
        assert r["roofline_us"] is None
        if r["cost_basis"] == "unknown":  # unknown is unknown: nothing claimed
            assert r["recoverable_us"] is None
        else:
            assert r["recoverable_us"] == pytest.approx(max(0.0, g["target_us"] - g["source_us"]))


@pytest.mark.corpus
@pytest.mark.parametrize("pair", ["gaunernst_bert-small-uncased", "Falconsai_nsfw_image_detection", "Qwen_Qwen1.5-0.5B-Chat"])
def test_corpus_roofline_uses_datasheet_ceilings_and_bounds_recoverable_time(corpus, pair, tmp_path):
    src, tgt = corpus / "kineto" / f"h100_{pair}.json.gz", corpus / "kineto" / f"mi300x_{pair}.json.gz"
    _, dest = diagnose(src, tgt, tmp_path, report=False)
    j = json.loads(dest.read_text())
    roof = j["roofline"]
    table = {d["id"]: d for d in tomllib.loads((REPO / "porter" / "data" / "devices.toml").read_text())["device"]}
    for role, part in (("source", "H100"), ("target", "MI300X")):
        c = roof["ceilings"][role]
        assert c["known"] and not c["measured"] and part in c["device"] and c["reason"].startswith("datasheet")
        spec = next(d for d in table.values() if d["name"] == c["device"])
        assert c["bytes_per_s"] == spec["bytes_per_s"]
    groups = {g["group_id"]: g for g in j["groups"]}
    assert len(roof["groups"]) == len(groups)
    for r in roof["groups"]:
        t = groups[r["group_id"]]["target_us"]
        assert (r["recoverable_us"] is None) == (r["cost_basis"] == "unknown")
        assert r["recoverable_us"] is None or 0.0 <= r["recoverable_us"] <= t + 1e-9
        assert 0.0 <= r["demonstrated_us"] <= t + 1e-9
    assert roof["totals"]["groups_with_costs"] > 0.5 * len(groups)
    fixes = j["fixes"]
    perf = [f for f in fixes if f["kind"] == "perf"]
    assert [f["rank"] for f in perf] == list(range(1, len(perf) + 1))
    assert [f["priority"] for f in perf] == sorted((f["priority"] for f in perf), reverse=True)


@pytest.mark.corpus
def test_largest_gemm_roofline_from_its_shapes_and_the_datasheet(corpus, tmp_path_factory):
    """Recompute one group's roofline by hand: 2*M*K*N FLOPs and bf16 bytes of its aten::mm
    (shapes from ops.parquet), MI300X bf16 peak and bandwidth straight from devices.toml."""
    diag = qwen_trace_diagnosis(tmp_path_factory)
    j = json.loads((diag / "diagnosis.json").read_text())
    ops = load_bundle(diag / "target").ops.set_index("op_id")
    roof = {r["group_id"]: r for r in j["roofline"]["groups"]}
    mm = [g for g in j["groups"] if g["op_class"] == "matmul" and g["n_target"] == 1
          and ops.loc[g["target_op_ids"][0], "framework_op"] == "aten::mm"]
    g = max(mm, key=lambda g: g["target_us"])
    op = ops.loc[g["target_op_ids"][0]]
    (m, k), (_, n) = json.loads(op["input_shapes"])[:2]
    assert "BFloat16" in op["dtypes"]
    mi300x = next(d for d in tomllib.loads((REPO / "porter" / "data" / "devices.toml").read_text())["device"]
                  if "MI300X" in d["name"])
    want = max(2.0 * m * k * n / mi300x["flops_per_s"]["bf16"], 2.0 * (m * k + k * n + m * n) / mi300x["bytes_per_s"]) * 1e6
    r = roof[g["group_id"]]
    assert r["roofline_us"] == pytest.approx(want, rel=1e-9)
    assert r["efficiency"] == pytest.approx(want / g["target_us"])
    assert r["recoverable_us"] == pytest.approx(g["target_us"] - want)  # the roofline is the lower bound (docs/perfmodel.md)


# ---------------------------------------------------------------- fixes

def _fused_attention_groups(diag: Path) -> set[str]:
    """Groups with a fused attention op (flash, efficient, SDPA backends) on either side, from the bundles."""
    j = json.loads((diag / "diagnosis.json").read_text())
    out = set()
    for side in ("source", "target"):
        ops = load_bundle(diag / side).ops.set_index("op_id")
        names = ops["framework_op"].where(ops["framework_op"] != "", ops["name"])
        for g in j["groups"]:
            inferred = (g["framework_op"], g["target_framework_op"] or "")  # stand-in kernels (attn_fwd) take these
            if any(FUSED_ATTENTION.search(n) for n in (*names.loc[g[f"{side}_op_ids"]], *inferred)):
                out.add(str(g["group_id"]))  # fixes name groups by string id (porter.analysis.fixes)
    return out


@pytest.mark.corpus
def test_qwen_fixes_never_propose_fusing_attention_that_is_fused(corpus, tmp_path_factory, tmp_path):
    diag = qwen_trace_diagnosis(tmp_path_factory)
    fixes = json.loads((diag / "diagnosis.json").read_text())["fixes"]
    assert fixes and fixes[0]["kind"] == "perf"
    fused = _fused_attention_groups(diag)
    assert len(fused) >= 24  # a flash attention call per decoder layer
    for f in fixes:
        if f["fix_id"] == "fuse-attention":
            assert not fused & set(f["group_ids"]), f
    # the flash-attention groups do get the fix that fits them
    backend = next(f for f in fixes if f["fix_id"] == "attention-backend")
    assert set(backend["group_ids"]) <= fused
    # without the already_fused guard (a user catalogue replacing the conditions), the old
    # catalogue would send an engineer to fuse those flash kernels: the guard is what stops it
    user = tmp_path / "fixes.toml"
    user.write_text('[[fix]]\nid = "fuse-attention"\n[fix.applies_when]\nop_class = ["attention", "softmax", "matmul"]\n'
                    'module = "attn|attention"\nmin_ratio = 1.2\nmin_kernel_ratio = 1.0\n')
    d = analyse(load_bundle(diag / "source"), load_bundle(diag / "target"), catalogue=load_catalogue(user))
    unguarded = next(f for f in d.extras["fixes"] if f["fix_id"] == "fuse-attention")
    assert fused & set(unguarded["group_ids"])


def _attention_group(**kw) -> dict:
    base = dict(group_id="a", module="model/layers/0/self_attn", op_class="attention", framework_op="aten::bmm",
                source_us=100.0, target_us=200.0, source_kernels=3, target_kernels=3, flops=float("nan"),
                bytes=float("nan"), dtype="bf16", input_shapes="", target_device_type="rocm", host_us=0.0)
    return base | kw


@pytest.mark.parametrize("group,proposed", [
    (_attention_group(), True),  # unfused attention math in an attention module
    (_attention_group(framework_op="aten::_scaled_dot_product_flash_attention"), False),
    (_attention_group(source_framework_op="aten::_efficient_attention_forward"), False),
    (_attention_group(already_fused=True), False),  # the module runs flash attention elsewhere
    (_attention_group(module="model/layers/0/self_attn/q_proj", op_class="matmul"), False),  # a projection
])
def test_fuse_attention_only_where_attention_is_unfused(group, proposed):
    ids = [f.fix_id for f in rank_fixes(pd.DataFrame([group]))]
    assert ("fuse-attention" in ids) == proposed, ids


def test_user_catalogue_reaches_diagnosis_json(tmp_path):
    """--catalogue merges over the built-in: a user fix shows up ranked, a disabled one is gone."""
    from test_diagnose import record_cpu_trace

    fast, slow = record_cpu_trace(tmp_path / "fast.json.gz", None), record_cpu_trace(tmp_path / "slow.json.gz", 2)
    user = tmp_path / "mine.toml"
    user.write_text('[[fix]]\nid = "block-2-rewrite"\ntitle = "Rewrite block 2"\nkind = "perf"\ntier = "S"\n'
                    'why = "w"\nfirst_step = "f"\n[fix.applies_when]\nmodule = "Block_2$|blocks/2$"\nmin_ratio = 1.5\n'
                    '[[fix]]\nid = "compiler-fusion"\ndisabled = true\n')
    r = run_porter("diagnose", "--from", str(fast), "--to", str(slow), "-o", str(tmp_path / "d"), "--catalogue", str(user),
                   "--no-report")
    assert r.returncode == 0, r.stderr
    fixes = json.loads((tmp_path / "d" / "diagnosis.json").read_text())["fixes"]
    ids = [f["fix_id"] for f in fixes]
    assert "block-2-rewrite" in ids and "compiler-fusion" not in ids
    assert "Rewrite block 2" in r.stdout  # the planted slowdown makes it a top fix in the summary
    user.write_text("[[fix]\n")
    r = run_porter("diagnose", "--from", str(fast), "--to", str(slow), "-o", str(tmp_path / "e"), "--catalogue", str(user))
    assert r.returncode == 2 and "invalid TOML" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "e").exists()  # checked before any work


def test_each_side_is_classified_once(tmp_path):
    """A side is a target, a trace file or a bundle; a path that does not exist and is no
    target is one error naming the side."""
    assert classify("cpu", "source").kind is InputKind.TARGET
    assert classify("cpu:inductor", "target").kind is InputKind.TARGET
    assert classify(str(FIXTURES / "cpu_mlp.json.gz"), "source").kind is InputKind.TRACE
    with pytest.raises(PorterError, match="source: no such bundle or trace file, and not a target"):
        classify(str(tmp_path / "nope.json"), "source")


def test_one_live_side_without_model_is_refused_before_capture(tmp_path):
    r = run_porter("diagnose", "--from", str(FIXTURES / "cpu_mlp.json.gz"), "--to", "xla", "-o", str(tmp_path / "d"))
    assert r.returncode == 2 and "needs a MODEL" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "d").exists()


# ---------------------------------------------------------------- stacks run single modules

@pytest.mark.parametrize("stack", ["eager", "xla"])
def test_run_module_matches_eager(stack):
    from porter.targets import get_stack

    st = get_stack(stack)
    if not st.availability("cpu").ok:
        pytest.skip(st.availability("cpu").reason)
    torch.manual_seed(0)
    mod, x = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU()).eval(), torch.randn(4, 16)
    out = st.run_module(mod, (x,), "cpu")
    assert isinstance(out, torch.Tensor) and out.device.type == "cpu"
    torch.testing.assert_close(out, mod(x).detach(), rtol=1e-5, atol=1e-6)


def test_ort_says_why_it_runs_no_single_module():
    from porter.core.errors import PorterError
    from porter.targets import get_stack

    with pytest.raises(PorterError, match="does not run single modules"):
        get_stack("ort").run_module(torch.nn.Linear(2, 2), (torch.randn(1, 2),), "cpu")


# ---------------------------------------------------------------- accuracy (live)

def _rows(diag: Path) -> dict[str, dict]:
    return {r["module"]: r for r in json.loads((diag / "diagnosis.json").read_text())["accuracy"]["modules"]}


@pytest.mark.slow
def test_live_transformer_cpu_to_xla_has_accuracy_for_every_leaf_module(tmp_path_factory):
    diag = live_transformer_diagnosis(tmp_path_factory)
    j = json.loads((diag / "diagnosis.json").read_text())
    acc = j["accuracy"]
    model = load_model("transformer").module
    leaves = [n.replace(".", "/") for n, m in model.named_modules() if n and not list(m.children())]
    rows = _rows(diag)
    for leaf in leaves:
        assert leaf in rows, leaf
        assert rows[leaf]["local_rel_l2"] is not None and rows[leaf]["propagated_rel_l2"] is not None
    assert rows[""]["propagated_rel_l2"] < acc["tolerance"]  # fp32 XLA:CPU vs eager: rounding only
    assert acc["dtype"] == "fp32" and "1e-04" in acc["tolerance_reason"] and acc["local"]["not_run"] == {} and acc["not_compared"] == {}
    assert not any(r["introduces_error"] for r in rows.values())
    for name in ("report.html", "report.md", "summary.md"):
        assert (diag / name).is_file()
    assert j["fixes"] is not None and j["roofline"]["ceilings"]["target"]["measured"]
    by_group = {g["group_id"]: g for g in j["groups"]}
    assert all(r["recoverable_us"] <= by_group[r["group_id"]]["target_us"] + 1e-9 for r in j["roofline"]["groups"])
    assert j["command"].startswith("porter diagnose transformer --from cpu --to xla")


@pytest.mark.slow
@pytest.mark.parametrize("target", ["xla", "cpu:inductor"])
def test_planted_accuracy_gap_is_blamed_on_the_fragile_module(target, tmp_path):
    """One-pass variance over values ~300 +- 1 (tests/models/fragile.py): summation order decides
    the result, so the norm's own (local) error stands out; modules after it only inherit."""
    diag = diagnose_cli(tmp_path / "d", PLANTED, "--from", "cpu", "--to", target, "--oracle", "fp64", "--no-report",
                        "--confirm", "0")  # about accuracy: no module re-timed alone
    j = json.loads((diag / "diagnosis.json").read_text())
    acc, rows = j["accuracy"], _rows(diag)
    tol = acc["tolerance"]
    assert [m for m, r in rows.items() if r["introduces_error"]] == ["norm"]
    assert rows["norm"]["local_rel_l2"] > 10 * tol
    assert rows["pre"]["local_rel_l2"] < tol
    for after in ("fc", "act", "out"):
        assert rows[after]["local_rel_l2"] < tol  # each is fine by itself ...
    assert rows[""]["propagated_rel_l2"] > 10 * tol  # ... yet the output carries the norm's error
    if target == "xla":  # XLA saves its own module outputs: the inheritance is visible per module
        assert rows["pre"]["propagated_rel_l2"] < tol
        assert all(rows[m]["propagated_rel_l2"] > 10 * tol for m in ("norm", "fc", "act", "out"))
    else:  # inductor's saved module outputs are eager: propagated error only at the output
        assert all(rows[m]["propagated_rel_l2"] is None for m in ("pre", "norm", "fc"))
    oracle = acc["oracle"]
    assert oracle is not None and oracle["multiplier"] == 2.0
    assert math.isclose(oracle["bound"], 2.0 * oracle["source_error"] + tol / 10)
    assert oracle["source_error"] > tol  # the fp32 one-pass variance is inexact on the source as well
    stable = next(f for f in j["fixes"] if f["fix_id"] == "stable-formulation")
    assert stable["kind"] == "accuracy" and stable["modules"] == ["norm"] and stable["severity"] > 10
    assert any(line.startswith("norm introduces error") for line in acc["findings"])


def test_group_ids_do_not_depend_on_string_hashing(tmp_path, monkeypatch):
    """Fixes and reports name groups by id: two processes with different str hash seeds agree."""
    trace = str(FIXTURES / "cpu_mlp.json.gz")
    runs = []
    for seed in ("1", "2"):
        monkeypatch.setenv("PYTHONHASHSEED", seed)
        r = run_porter("diagnose", "--from", trace, "--to", trace, "-o", str(tmp_path / seed), "--no-report")
        assert r.returncode == 0, r.stderr
        runs.append(json.loads((tmp_path / seed / "diagnosis.json").read_text()))
    assert [(g["group_id"], g["source_op_ids"]) for g in runs[0]["groups"]] == \
        [(g["group_id"], g["source_op_ids"]) for g in runs[1]["groups"]]
