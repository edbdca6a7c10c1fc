"""Accuracy: metrics against independent formulas, per-module blame on a real model with
one deliberately low-precision module, and the fp64 oracle on real fp32/bf16/fp16 runs."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from porter.analysis.accuracy import (
    compare_modules, error_metrics, load_activations, oracle_verdict, shadow_run, tolerance_for,
)
from porter.core.errors import BundleError


def test_metrics_match_plain_python_formulas():
    rng = np.random.default_rng(0)
    ref = rng.standard_normal(257)
    act = ref + 1e-3 * rng.standard_normal(257)
    m = error_metrics(ref, act)
    err2 = math.fsum((a - r) ** 2 for a, r in zip(act, ref))
    ref2 = math.fsum(r * r for r in ref)
    act2 = math.fsum(a * a for a in act)
    dot = math.fsum(a * r for a, r in zip(act, ref))
    assert m.max_abs == max(abs(a - r) for a, r in zip(act, ref))
    assert m.rel_l2 == pytest.approx(math.sqrt(err2 / ref2), rel=1e-12)
    assert m.cosine == pytest.approx(dot / math.sqrt(ref2 * act2), rel=1e-12)
    assert m.sqnr_db == pytest.approx(10 * math.log10(ref2 / err2), rel=1e-12)


def test_metrics_accept_torch_low_precision_and_identical_inputs():
    x = torch.randn(64, 32)
    m = error_metrics(x, x.clone())
    assert m.max_abs == 0 and m.rel_l2 == 0 and m.sqnr_db == math.inf and m.cosine == pytest.approx(1.0)
    m = error_metrics(x, x.bfloat16())
    # bf16 keeps 8 significant bits: relative rounding error at most 2^-9 per element
    assert 0 < m.rel_l2 < 2**-8
    assert 40 < m.sqnr_db < 60
    with pytest.raises(ValueError):
        error_metrics(x, x[:10])


def test_tolerances_are_ordered_and_overridable():
    assert tolerance_for("float") < tolerance_for("c10::Half") < tolerance_for("bf16")
    assert tolerance_for("bf16", {"bf16": 0.5}) == 0.5


class LowPrecision(nn.Module):
    """Runs the wrapped module's arithmetic in a 16-bit dtype: the 'target' defect."""

    def __init__(self, inner: nn.Module, dtype: torch.dtype):
        super().__init__()
        self.inner = copy.deepcopy(inner).to(dtype)
        self.dtype = dtype

    def forward(self, x):
        return self.inner(x.to(self.dtype)).float()


class Block(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.fc1 = nn.Linear(d, 4 * d)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * d, d)
        self.norm = nn.LayerNorm(d)

    def forward(self, x):
        return self.norm(x + self.fc2(self.act(self.fc1(x))))


class Net(nn.Module):
    def __init__(self, d: int = 64):
        super().__init__()
        self.blocks = nn.ModuleList([Block(d) for _ in range(3)])
        self.head = nn.Linear(d, 16)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def _record(model: nn.Module, x: torch.Tensor) -> tuple[dict, dict, dict]:
    """Per-module outputs and first inputs keyed by porter module path, plus the modules."""
    outs, ins, mods = {}, {}, {}
    handles = []
    for name, mod in model.named_modules():
        if not name or ".inner" in name:
            continue
        path = name.replace(".", "/")
        mods[path] = mod

        def hook(m, args, out, path=path):
            ins[path] = args[0].detach().clone()
            outs[path] = out.detach().clone()
        handles.append(mod.register_forward_hook(hook))
    with torch.no_grad():
        model(x)
    for h in handles:
        h.remove()
    return outs, ins, mods


@pytest.fixture(scope="module")
def runs():
    torch.manual_seed(0)
    source = Net()
    target = copy.deepcopy(source)
    target.blocks[1].fc1 = LowPrecision(source.blocks[1].fc1, torch.bfloat16)
    x = torch.randn(8, 64)
    src_out, src_in, _ = _record(source, x)
    tgt_out, _, tgt_mods = _record(target, x)
    with torch.no_grad():
        shadow = shadow_run(tgt_mods, src_in, lambda m, inp: m(inp))
    return src_out, tgt_out, shadow


def test_lossy_module_is_blamed_and_downstream_only_inherits(runs):
    src_out, tgt_out, shadow = runs
    assert not shadow.failures
    df = compare_modules(src_out, tgt_out, shadow.outputs, dtype="fp32").set_index("module")
    tol = tolerance_for("fp32")
    assert df.loc["blocks/1/fc1", "introduces_error"]
    assert df.loc["blocks/1/fc1", "local_rel_l2"] > 10 * tol
    assert df.index[df["introduces_error"]].tolist() == ["blocks/1/fc1"]
    # downstream modules carry the error end to end but add none of their own
    for m in ("blocks/1/fc2", "blocks/2/fc1", "blocks/2/norm", "head"):
        assert df.loc[m, "propagated_rel_l2"] > tol, m
        assert df.loc[m, "local_rel_l2"] < tol, m
    # the parent block's own run contains the lossy child: above tolerance, but not blamed
    assert df.loc["blocks/1", "local_rel_l2"] > tol and not df.loc["blocks/1", "introduces_error"]
    # upstream of the defect nothing differs at all
    assert df.loc["blocks/0/fc1", "propagated_rel_l2"] == 0


def test_without_local_outputs_nobody_is_blamed(runs):
    src_out, tgt_out, _ = runs
    df = compare_modules(src_out, tgt_out)
    assert df["local_rel_l2"].isna().all() and not df["introduces_error"].any()


def test_shadow_run_records_failures():
    mods = {"a": nn.Linear(4, 4), "b": nn.Linear(3, 3)}
    res = shadow_run(mods, {"a": torch.randn(2, 4), "b": torch.randn(2, 4), "missing": torch.randn(1)}, lambda m, x: m(x))
    assert set(res.outputs) == {"a"} and set(res.failures) == {"b"}
    assert "RuntimeError" in res.failures["b"]


def test_oracle_on_real_fp64_fp32_bf16_fp16_runs():
    torch.manual_seed(1)
    model = Net().eval()
    x = torch.randn(16, 64)
    with torch.no_grad():
        ref = copy.deepcopy(model).double()(x.double())
        fp32 = model(x)
        bf16 = copy.deepcopy(model).bfloat16()(x.bfloat16())
        fp16 = copy.deepcopy(model).half()(x.half())
    # same fp32 computation on both sides: target error equals source error, passes
    assert oracle_verdict(fp32, fp32, ref, dtype="fp32").passed
    # an fp32 model ported to bf16 is orders of magnitude further from fp64: fails
    v = oracle_verdict(fp32, bf16, ref, dtype="fp32")
    assert not v.passed and v.target_error > 100 * v.source_error and v.multiplier == 2
    # a bf16 model whose target runs fp16 (3 more mantissa bits) is closer to fp64: passes
    assert oracle_verdict(bf16, fp16, ref, dtype="bf16").passed
    # an fp16 model ported to bf16 loses ~8x (2^3) precision: beyond the 3x multiplier
    v = oracle_verdict(fp16, bf16, ref, dtype="fp16")
    assert not v.passed and v.multiplier == 3


def test_load_activations_roundtrip_and_missing(tmp_path):
    (tmp_path / "activations").mkdir()
    outs = {"blocks/0/attn": torch.randn(2, 3), "head": torch.randn(4)}
    save_file(outs, str(tmp_path / "activations" / "outputs.safetensors"))
    acts = load_activations(tmp_path)
    assert set(acts.outputs) == set(outs) and acts.inputs == {}
    assert torch.equal(acts.outputs["head"], outs["head"])
    with pytest.raises(BundleError):
        load_activations(tmp_path / "nope")
    (tmp_path / "activations" / "outputs.safetensors").write_bytes(b"garbage")
    with pytest.raises(BundleError):
        load_activations(tmp_path)


# ---------------------------------------------------------------- sketches (bounded, cross-host)

def test_sample_positions_depend_only_on_the_element_count():
    from porter.targets.sketch import SAMPLES, positions

    a, b = positions(10_000), positions(10_000)
    assert np.array_equal(a, b) and len(a) == SAMPLES and len(np.unique(a)) == SAMPLES
    assert np.all(np.diff(a) > 0) and a.max() < 10_000
    assert not np.array_equal(positions(10_001)[:50], a[:50])  # another size, another draw
    assert np.array_equal(positions(300), np.arange(300))  # small tensors: every element


def test_sampled_rel_l2_and_its_standard_error_cover_the_full_tensor_value():
    """Over 200 independent perturbations of a 100k-element tensor, the full-tensor rel-L2 lies
    within 2 standard errors of the 1024-sample estimate about 95% of the time (a normal
    approximation; >= 85% allows for the heavy tail of squared errors)."""
    from porter.analysis.accuracy import sampled_rel_l2
    from porter.targets.sketch import positions

    n = 100_000
    idx = positions(n)
    rng = np.random.default_rng(7)
    covered, rel_se = 0, []
    for _ in range(200):
        ref = rng.normal(size=n) * rng.uniform(0.5, 2.0, size=n)
        act = ref + 1e-3 * rng.standard_t(5, size=n)
        truth = float(np.linalg.norm(act - ref) / np.linalg.norm(ref))
        est, se = sampled_rel_l2(ref[idx], act[idx], n)
        covered += abs(est - truth) <= 2 * se
        rel_se.append(se / est)
    assert covered >= 170, covered
    assert 0.01 < np.median(rel_se) < 0.1  # ~ 1/sqrt(k) scale for k = 1024
    ref = rng.normal(size=500)
    est, se = sampled_rel_l2(ref, ref * (1 + 1e-3), 500)  # every element sampled: exact, no error bar
    assert math.isclose(est, 1e-3, rel_tol=1e-9) and se == 0.0


def test_torch_sketch_summary_is_exact_over_the_whole_tensor():
    from porter.targets.sketch import positions, torch_sketch

    t = torch.randn(64, 100)
    t[3, 4], t[5, 6] = float("nan"), float("inf")
    summary, samples = torch_sketch(t)
    clean = torch.where(torch.isfinite(t), t, torch.zeros(())).double()
    assert summary.nan == 1 and summary.inf == 1 and summary.numel == 6400 and summary.shape == [64, 100]
    assert math.isclose(summary.l2, float(clean.norm()), rel_tol=1e-12)
    assert math.isclose(summary.max_abs, float(clean.abs().max()), rel_tol=1e-12)
    np.testing.assert_array_equal(samples, t.reshape(-1).double().numpy()[positions(6400)])


def test_compare_sketches_lists_each_module_it_cannot_compare():
    from porter.analysis.accuracy import Sketches, compare_sketches

    def summ(n):
        return {"shape": [n], "dtype": "float32", "numel": n, "l2": 1.0, "max_abs": 1.0, "nan": 0, "inf": 0}

    src = Sketches({"a": summ(8), "b": summ(8), "c": summ(8)}, {k: np.ones(8) for k in "abc"})
    tgt = Sketches({"a": summ(8), "b": summ(9), "d": summ(8)}, {"a": np.ones(8) * 1.5, "b": np.ones(9), "d": np.ones(8)})
    df, gaps = compare_sketches(src, tgt)
    assert list(df["module"]) == ["a"] and math.isclose(df["propagated_rel_l2"].iloc[0], 0.5)
    assert set(gaps) == {"b", "c", "d"} and "shapes differ" in gaps["b"]
    # the same element count in another layout holds other elements at the sampled positions
    lay = {"shape": [2, 2, 4], "dtype": "float32", "numel": 16, "l2": 1.0, "max_abs": 1.0, "nan": 0, "inf": 0}
    df, gaps = compare_sketches(Sketches({"q": {**lay, "shape": [2, 8]}, "s": {**lay, "shape": [2, 1, 8]}}, {"q": np.ones(16), "s": np.ones(16)}),
                                Sketches({"q": lay, "s": {**lay, "shape": [2, 8]}}, {"q": np.ones(16), "s": np.ones(16)}))
    assert list(df["module"]) == ["s"] and "shapes differ: source [2, 8], target [2, 2, 4]" in gaps["q"]


def test_findings_never_claim_no_error_when_modules_were_not_compared():
    import pandas as pd

    from porter.accuracy.findings import findings
    from porter.accuracy.local import LocalRun
    from porter.analysis.accuracy import ErrorMetrics

    df = pd.DataFrame({"module": ["a", ""], "propagated_rel_l2": [1e-6, 1e-6], "local_rel_l2": [1e-6, math.nan],
                       "tolerance": [1e-4, 1e-4], "introduces_error": [False, False]})
    local = LocalRun(how="live", metrics={"a": ErrorMetrics(0, 1e-6, 1, 100)})
    assert any(f.startswith("no module introduces error") for f in findings(df, "fp32", None, local, {}, [], ""))
    gappy = LocalRun(how="live", metrics=local.metrics, not_run={"b": "running it alone on xla failed: X"})
    lines = findings(df, "fp32", None, gappy, {"c": "the target bundle has no sketch of it"}, [], "")
    assert not any(f.startswith("no module introduces") for f in lines)
    assert any("no module among the 1 with a local error" in f for f in lines)
    assert any("1 module(s) not compared, e.g. c" in f for f in lines) and any("b: running it alone" in f for f in lines)
