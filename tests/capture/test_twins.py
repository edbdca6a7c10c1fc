"""A PyTorch transformer and its Flax NNX rewrite with the same weights and other names
(tests/models/twins.py): porter pairs their modules by parameters, reports time and accuracy
per paired module, and names a numerical bug planted in one JAX module first."""

from __future__ import annotations

import importlib.util
import json

import pytest

from conftest import REPO, run_porter

TWINS = REPO / "tests" / "models" / "twins.py"
pytestmark = [pytest.mark.slow, pytest.mark.skipif(importlib.util.find_spec("flax") is None,
                                                     reason="flax is not installed (the test command installs it)")]


@pytest.fixture(scope="module")
def captures(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("twins")
    for factory, on in (("torch_twin", "cpu"), ("nnx_twin", "xla"), ("nnx_twin_bad_eps", "xla"), ("nnx_twin_fp16_fc1", "xla")):
        r = run_porter("capture", f"{TWINS}:{factory}", "--on", on, "-o", str(tmp / factory))
        assert r.returncode == 0, r.stderr[-3000:]
    return tmp


def diagnose(captures, target: str, *, with_models: bool = False) -> dict:
    out = captures / (f"d-{target}" + ("-models" if with_models else ""))
    models = [f"{TWINS}:torch_twin", "--target-model", f"{TWINS}:{target}"] if with_models else []
    r = run_porter("diagnose", *models[:1], "--from", str(captures / "torch_twin"), "--to", str(captures / target),
                   "-o", str(out), *models[1:])
    assert r.returncode == 0, r.stderr[-3000:]
    d = json.loads((out / "diagnosis.json").read_text())
    d["_stdout"] = r.stdout
    return d


def test_modules_pair_by_parameters_and_carry_time_and_accuracy_on_both_sides(captures):
    d = diagnose(captures, "nnx_twin")
    m = d["module_map"]
    assert m["parameterised"] == [14, 14] and m["by_parameters"] == 14 and m["share"] == 1.0
    for i in range(2):  # each Flax module under the torch module holding the same weights
        for flax, torch_name in (("attn/qkv", "attention/in_proj"), ("attn/proj", "attention/out_proj"), ("ln1", "norm1"),
                                 ("ln2", "norm2"), ("mlp/fc1", "ff/up"), ("mlp/fc2", "ff/down"), ("attn", "attention"),
                                 ("mlp", "ff"), ("", "")):
            assert m["mapping"][f"blocks/{i}" + (f"/{flax}" if flax else "")] == f"layers/{i}" + (f"/{torch_name}" if torch_name else "")
    assert m["mapping"]["tok"] == "embed" and m["mapping"]["head"] == "lm_head"
    torch_modules = [p for p, _ in json.loads((captures / "torch_twin" / "manifest.json").read_text())["model"]["module_params"]
                     if p and p != "layers"]
    timed = {r["key"] for r in d["by_module"] if r["source_us"] > 0 and r["target_us"] > 0}
    assert len(timed & set(torch_modules)) >= 0.95 * len(torch_modules)
    acc = d["accuracy"]
    compared = {r["module"] for r in acc["modules"] if r["propagated_rel_l2"] is not None}
    assert set(torch_modules) <= compared
    assert all(r["propagated_rel_l2"] < acc["tolerance"] for r in acc["modules"]) and acc["suspects"] == []


def test_a_wrong_epsilon_in_one_jax_module_is_named_first(captures):
    acc = diagnose(captures, "nnx_twin_bad_eps")["accuracy"]
    assert acc["suspects"][0] == "layers/1/norm2"  # the Flax model's blocks/1/ln2, in the source's names
    assert "propagated error first exceeds tolerance at layers/1/norm2 (the target's blocks/1/ln2)" in " ".join(acc["findings"])
    before = {r["module"]: r["propagated_rel_l2"] for r in acc["modules"]}
    assert before["layers/1/attention"] < acc["tolerance"] < before["layers/1/norm2"]  # clean up to the planted module


def test_with_both_factories_the_wrong_epsilon_is_named_with_its_op_and_the_sources_constant(captures):
    d = diagnose(captures, "nnx_twin_bad_eps", with_models=True)
    acc = d["accuracy"]
    row = {r["module"]: r for r in acc["modules"]}["layers/1/norm2"]
    # flax's LayerNorm at eps 1e-1 against torch's at 1e-5, on the same recorded call: the module's own error
    assert row["introduces_error"] and row["local_rel_l2"] > 100 * acc["tolerance"]
    op = acc["ops"]["layers/1/norm2"]
    assert op["op"] == "add" and op["call"] == "add(float32[4, 64, 1], 0.1)", op
    assert op["source_op"] == "add(float32[4, 64, 1], 1e-05)" and op["local_rel_l2"] > acc["tolerance"]
    assert op["where"].startswith("flax/nnx/nn/normalization.py:")
    assert "op: blocks/1/ln2 → #" in " ".join(acc["findings"])
    fix = next(f for f in d["fixes"] if f["kind"] == "accuracy")
    assert fix["fix_id"] == "rewrite-matches-original" and "layers/1/norm2" in fix["modules"], fix
    assert all(f["fix_id"] != "stable-formulation" for f in d["fixes"])  # the rewrite's constant, not cancelling math


def test_a_float16_matmul_in_one_jax_module_is_named_at_its_cast(captures):
    acc = diagnose(captures, "nnx_twin_fp16_fc1", with_models=True)["accuracy"]
    assert acc["suspects"] == ["layers/1/ff/up"]  # blocks/1/mlp/fc1 in the source's names
    op = acc["ops"]["layers/1/ff/up"]
    assert op["call"] == "convert_element_type(float32[4, 64, 128] -> float16)" and op["source_op"] is None, op
    assert op["where"].startswith("twins.py:") and "HalfLinear.__call__" in op["where"]
    local = {r["module"]: r["local_rel_l2"] for r in acc["modules"]}
    assert local["layers/1/ff/up"] > acc["tolerance"]  # float16's rounding: ~2^-11 relative on inputs and weights


def test_the_clean_rewrite_with_both_factories_names_nothing(captures):
    acc = diagnose(captures, "nnx_twin", with_models=True)["accuracy"]
    assert acc["suspects"] == [] and acc["ops"] == {}
    assert not any("introduces error" in f for f in acc["findings"])


def test_without_the_factories_the_finding_says_how_to_get_the_op(captures):
    acc = diagnose(captures, "nnx_twin_bad_eps")["accuracy"]
    line = next(f for f in acc["findings"] if f.startswith("propagated error first exceeds"))
    assert "--target-model" in line and "nnx_twin_bad_eps" in line and "torch_twin" in line


def test_the_live_pair_runs_torch_on_cpu_and_the_rewrite_on_xla_and_names_the_op(tmp_path):
    out = tmp_path / "d"
    r = run_porter("diagnose", f"{TWINS}:torch_twin", "--from", "cpu", "--to", "xla", "--target-model",
                   f"{TWINS}:nnx_twin_bad_eps", "-o", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    d = json.loads((out / "diagnosis.json").read_text())
    assert d["module_map"]["share"] == 1.0 and d["headline"]["n"] >= 20  # timed alternately, here
    assert d["inputs"]["source"]["label"] == "torch_twin@cpu:eager" and d["inputs"]["target"]["label"].startswith("nnx_twin_bad_eps@xla")
    assert d["accuracy"]["suspects"] == ["layers/1/norm2"]
    assert d["accuracy"]["ops"]["layers/1/norm2"]["call"] == "add(float32[4, 64, 1], 0.1)"
    assert any("not re-timed alone" in w for w in d["warnings"])


def test_target_model_refusals_are_one_line(captures, tmp_path):
    cases = [
        (["--from", str(captures / "torch_twin"), "--to", str(captures / "nnx_twin"), "--target-model", f"{TWINS}:nnx_twin"],
         "no MODEL is given"),
        ([f"{TWINS}:nnx_twin", "--from", "cpu", "--to", "xla", "--target-model", f"{TWINS}:nnx_twin"],
         "is a JAX program"),
        ([f"{TWINS}:torch_twin", "--from", "cpu", "--to", "xla", "--target-model", f"{TWINS}:nnx_twin", "--dtype", "bf16"],
         "a rewrite is compared in the dtype"),
        ([f"{TWINS}:torch_twin", "--from", str(captures / "torch_twin"), "--to", str(captures / "nnx_twin"),
          "--target-model", f"{TWINS}:torch_twin"], "is a PyTorch model"),
    ]
    for args, words in cases:
        r = run_porter("diagnose", *args, "-o", str(tmp_path / "d"))
        assert r.returncode == 2 and words in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert not (tmp_path / "d").exists()
