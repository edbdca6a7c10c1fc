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
    for factory, on in (("torch_twin", "cpu"), ("nnx_twin", "xla"), ("nnx_twin_bad_eps", "xla")):
        r = run_porter("capture", f"{TWINS}:{factory}", "--on", on, "-o", str(tmp / factory))
        assert r.returncode == 0, r.stderr[-3000:]
    return tmp


def diagnose(captures, target: str) -> dict:
    out = captures / f"d-{target}"
    r = run_porter("diagnose", "--from", str(captures / "torch_twin"), "--to", str(captures / target), "-o", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads((out / "diagnosis.json").read_text())


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
