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
from porter.errors import BundleError


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
