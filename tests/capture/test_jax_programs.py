"""JAX programs as MODEL (porter/capture/models/jaxprog.py): a plain jax.numpy function whose
modules are its named scopes, and a Flax NNX transformer whose modules are its module tree,
captured on XLA by the real CLI and diagnosed between two XLA configurations (fp32 -> bf16)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO, run_porter

MODELS = REPO / "tests" / "models" / "jax_programs.py"
needs_flax = pytest.mark.skipif(importlib.util.find_spec("flax") is None,
                                reason="flax is not installed (the test command installs it)")


def capture(tmp: Path, factory: str, *extra: str) -> Path:
    out = tmp / (factory + "".join(extra).replace("-", "_"))
    r = run_porter("capture", f"{MODELS}:{factory}", "--on", "xla", *extra, "-o", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    return out


def module_time(bundle: Path) -> pd.Series:
    ops = pd.read_parquet(bundle / "ops.parquet")
    return ops.groupby("module")["device_us"].sum()


@pytest.mark.slow
def test_a_jax_function_is_captured_with_its_named_scopes_as_modules_and_diagnosed_fp32_to_bf16(tmp_path):
    fp32, bf16 = capture(tmp_path, "mlp"), capture(tmp_path, "mlp", "--dtype", "bf16")
    manifest = json.loads((fp32 / "manifest.json").read_text())
    assert manifest["target"]["stack"] == "xla" and manifest["stack_info"]["program"] == "function"
    assert manifest["model"]["params"] == 256 * 1024 * 2 + 1024 + 256 and manifest["model"]["input_shapes"] == [[64, 256]]
    t = module_time(fp32)
    scoped = {"mlp/fc1", "mlp/act", "mlp/fc2", "head"}
    assert scoped <= set(t.index) and t[list(scoped)].sum() / t.sum() > 0.95
    assert t["mlp/fc1"] > t["mlp/act"] and t["mlp/fc2"] > t["head"]  # the matmuls outweigh the elementwise ops
    assert json.loads((bf16 / "manifest.json").read_text())["precision"]["dtype"] == "bf16"
    d = run_porter("diagnose", "--from", str(fp32), "--to", str(bf16), "-o", str(tmp_path / "d"))
    assert d.returncode == 0, d.stderr[-3000:]
    doc = json.loads((tmp_path / "d" / "diagnosis.json").read_text())
    keys = {r["key"] for r in doc["by_module"] if r["source_us"] > 0 and r["target_us"] > 0}
    assert scoped <= keys
    acc = doc["accuracy"]
    (out,) = [m for m in acc["modules"] if m["module"] == ""]  # the model output, in full (a function has no module outputs)
    assert acc["dtype"] == "bf16" and 0 < out["propagated_rel_l2"] < acc["tolerance"] and out["sampled"] == out["numel"]


@needs_flax
@pytest.mark.slow
def test_a_flax_nnx_transformer_runs_with_its_module_tree_and_per_module_accuracy(tmp_path):
    import jax
    from flax import nnx

    import tests.models.jax_programs as jp

    model, _ = jp.nnx_transformer()
    params = sum(x.size for x in jax.tree_util.tree_leaves(nnx.state(model)))
    tree = {"/".join(map(str, p)) for p, n in nnx.iter_graph(model) if p and isinstance(n, nnx.Module) and callable(n)}
    fp32, bf16 = capture(tmp_path, "nnx_transformer"), capture(tmp_path, "nnx_transformer", "--dtype", "bf16")
    manifest = json.loads((fp32 / "manifest.json").read_text())
    assert manifest["stack_info"]["program"] == "nnx" and manifest["model"]["params"] == params
    t = module_time(fp32)
    assert set(t.index) - {""} <= tree  # every op's module is a path of the Flax module tree
    assert {"blocks/0/attn/qkv", "blocks/1/mlp/fc1", "head", "tok"} <= set(t.index)
    assert t.drop("", errors="ignore").sum() / t.sum() > 0.9
    acts = manifest["activations"]
    assert acts["captured"] and acts["sketched"] == len(tree) and acts["not_recorded"] == {}
    d = run_porter("diagnose", "--from", str(fp32), "--to", str(bf16), "-o", str(tmp_path / "d"))
    assert d.returncode == 0, d.stderr[-3000:]
    acc = json.loads((tmp_path / "d" / "diagnosis.json").read_text())["accuracy"]
    compared = {m["module"] for m in acc["modules"] if m["propagated_rel_l2"] is not None}
    assert compared == tree | {""}  # every module of the tree, and the model output
    assert all(0 < m["propagated_rel_l2"] < m["tolerance"] for m in acc["modules"])  # bf16 changes them, within bf16's bound


def test_a_jax_program_elsewhere_than_xla_is_one_line(tmp_path):
    r = run_porter("capture", f"{MODELS}:mlp", "--on", "cpu", "-o", str(tmp_path / "a"))
    assert r.returncode == 2 and "is a JAX program: it runs on XLA, not on the eager stack" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "a").exists()
    r = run_porter("diagnose", f"{MODELS}:mlp", "--from", "cpu", "--to", "xla", "-o", str(tmp_path / "d"))
    assert r.returncode == 2 and "is a JAX program" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "d").exists()


@pytest.mark.slow
def test_a_jax_program_diagnoses_live_between_two_xla_configurations(tmp_path):
    r = run_porter("diagnose", f"{MODELS}:mlp", "--from", "xla", "--to", "xla", "--dtype", "bf16", "-o", str(tmp_path / "d"))
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads((tmp_path / "d" / "diagnosis.json").read_text())
    assert doc["headline"]["n"] >= 20 and doc["headline"]["ratio"] > 0  # both forwards timed alternately, here
    keys = {r["key"] for r in doc["by_module"] if r["source_us"] > 0 and r["target_us"] > 0}
    assert {"mlp/fc1", "mlp/act", "mlp/fc2", "head"} <= keys
    acc = doc["accuracy"]
    (out,) = [m for m in acc["modules"] if m["module"] == ""]
    assert acc["dtype"] == "bf16" and 0 < out["propagated_rel_l2"] < acc["tolerance"]
    assert acc["local"]["how"].startswith("a JAX program") and acc["precision"]["judged"] is False
    assert any("not re-timed alone" in w for w in doc["warnings"])  # --confirm's default, said, not silently dropped


@pytest.mark.slow
def test_a_pallas_kernel_is_one_custom_kernel_op_in_its_module_not_a_cloud_of_loop_ops(tmp_path):
    """pallas_call(interpret=True) on the CPU runs as a loop of ~20 HLO ops per call; porter scopes
    the call while tracing and the reader merges them into one op per call."""
    bundle = capture(tmp_path, "pallas_mlp")
    ops = pd.read_parquet(bundle / "ops.parquet")
    kernels = pd.read_parquet(bundle / "kernels.parquet")
    mine = ops[ops.framework_op == "pallas_call(_exp_add_kernel)"]
    assert set(mine.op_class) == {"custom_kernel"} and set(mine.module) == {"block/act"}
    assert set(ops.loc[ops.module == "block/act", "framework_op"]) == {"pallas_call(_exp_add_kernel)"}
    loop = mine[mine.name == "pallas_call(_exp_add_kernel)"]  # the merged loop: one op per call, per profiled step
    per_step = loop.groupby("step").size()
    assert (per_step == 1).all() and len(per_step) == json.loads((bundle / "manifest.json").read_text())["steps"]
    assert (loop.kernel_count >= 10).all()  # the HLO ops it holds
    assert len(mine) <= 2 * len(per_step)  # at most the kernel's output init beside its loop, per call
    k = kernels[kernels.op_id.isin(mine.op_id)]
    assert mine.device_us.sum() == pytest.approx(k.dur_us.sum(), rel=1e-9)
    shown = run_porter("show", str(bundle), "--by", "op")
    assert shown.returncode == 0 and shown.stdout.count("pallas_call(_exp_add_kernel)") == 1


@pytest.mark.skipif(importlib.util.find_spec("equinox") is None, reason="equinox is not installed (the test command installs it)")
@pytest.mark.slow
def test_an_equinox_module_runs_with_its_fields_as_modules(tmp_path):
    bundle = capture(tmp_path, "equinox_mlp")
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["stack_info"]["program"] == "equinox"
    assert manifest["model"]["params"] == 256 * 1024 * 2 + 1024 + 256 + 2 * 256
    t = module_time(bundle)
    assert {"layers/0", "layers/1", "norm"} <= set(t.index) and t[["layers/0", "layers/1", "norm"]].sum() / t.sum() > 0.85
    sigs = dict((p, v) for p, v in manifest["model"]["module_params"])
    assert [sorted(x[0]) for x in sigs["layers/0"]] == [[256, 1024], [1024]]  # each module's own parameters
    # called under jax.vmap, as Equinox layers usually are: no sketch, and it says why
    assert set(manifest["activations"]["not_recorded"]) == {"layers/0", "layers/1", "norm"}
    assert all("jax transformation" in why for why in manifest["activations"]["not_recorded"].values())
