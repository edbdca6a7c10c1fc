"""The xla (torchax/JAX) and ort (ONNX Runtime) stacks: real captures of the built-in
transformer on this CPU, checked against a torch eager capture of the same model."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch

from porter.capture.models import load_model
from porter.core.tags import module_from_tags, module_range, module_scope
from tests.conftest import run_porter

MODEL = "transformer"
TARGETS = {"cpu": "cpu", "xla": "xla", "ort": "cpu:ort"}
# fp32 everywhere: XLA and ORT fuse and reorder the sums of matmuls and LayerNorm, which moves
# results by a few ulps (relative ~1e-7 per element, growing ~sqrt(K) with the reduction
# length K <= 512). 1e-5 keeps ~20x margin over that and is far below any real lowering bug.
ACT_REL_L2_TOL = 1e-5


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("captures")
    out: dict[str, Path] = {}
    for key, target in TARGETS.items():
        dest = base / key
        done = run_porter("capture", MODEL, "--on", target, "-o", str(dest), "--steps", "3", "--repeats", "5")
        assert done.returncode == 0, f"{target}: {done.stderr[-3000:]}"
        out[key] = dest
    return out


def leaf_paths() -> set[str]:
    model = load_model(MODEL).module
    return {n.replace(".", "/") for n, m in model.named_modules() if n and not list(m.children())}


def timed_modules(bundle: Path) -> set[str]:
    ops = pd.read_parquet(bundle / "ops.parquet")
    return set(ops.loc[ops["device_us"] > 0, "module"])


def rel_l2(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / a.norm().clamp_min(1e-30))


def test_porter_tags_decode_to_torch_paths():
    # what the stacks write is what the readers decode (torch ranges hold paths, XLA scopes names)
    assert module_from_tags([module_scope(""), module_scope("blocks.0.attn")]) == "blocks/0/attn"
    assert module_range("blocks/0/attn") == "porter.module:blocks/0/attn"
    scopes = ["porter.module:", "porter.module:blocks.0", "porter.module:blocks.0.attn", "aten::gelu"]
    assert module_from_tags(scopes) == "blocks/0/attn"
    assert module_from_tags(["porter.module:", "aten::add.Tensor"]) == ""
    assert module_from_tags(["fc1", "linear"]) is None


@pytest.mark.slow
@pytest.mark.parametrize("key", ["xla", "ort"])
def test_capture_writes_bundle_with_module_paths(bundles, key):
    bundle = bundles[key]
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["status"] == "ok"
    assert (bundle / manifest["raw"]["path"]).is_file()
    ops = pd.read_parquet(bundle / "ops.parquet")
    assert len(ops) and float(ops["device_us"].sum()) > 0
    known = set(load_model(MODEL).module_paths()) | {""}
    assert set(ops["module"]) <= known, set(ops["module"]) - known
    tagged = float(ops.loc[ops["module"] != "", "device_us"].sum()) / float(ops["device_us"].sum())
    assert tagged >= 0.95, tagged  # only the embedding sum at the root is outside every module


@pytest.mark.slow
@pytest.mark.parametrize("key", ["xla", "ort"])
def test_profiled_steps_only(bundles, key):
    """Steps 0..2 for --steps 3, each holding device time; ORT's in-session warm-up run
    (profile_warmup_runs in the manifest) is not among them."""
    manifest = json.loads((bundles[key] / "manifest.json").read_text())
    ops = pd.read_parquet(bundles[key] / "ops.parquet")
    per_step = ops.groupby("step")["device_us"].sum()
    assert list(per_step.index) == [0, 1, 2]
    assert (per_step > 0).all()
    if key == "ort":
        raw = json.loads((bundles[key] / manifest["raw"]["path"]).read_text())
        runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in raw if e.get("cat") == "Session" and e["name"] == "model_run")
        warm = manifest["stack_info"]["profile_warmup_runs"]
        assert warm >= 1 and len(runs) == 3 + warm
        nodes = [e for e in raw if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
        profiled = [e for e in nodes if any(a <= e["ts"] <= b for a, b in runs[warm:])]
        assert len(ops) == len(profiled) < len(nodes)
        assert float(ops["device_us"].sum()) == pytest.approx(sum(e["dur"] for e in profiled), rel=1e-6)


@pytest.mark.slow
def test_xla_leaf_modules_equal_eager(bundles):
    leaves = leaf_paths()
    assert timed_modules(bundles["xla"]) & leaves == timed_modules(bundles["cpu"]) & leaves == leaves


@pytest.mark.slow
def test_ort_leaf_modules_are_eager_minus_constant_folded(bundles):
    """The exporter folds modules whose output does not depend on the inputs (the position
    embedding of arange), so they run no node: ORT's leaves are eager's minus exactly those."""
    spec = load_model(MODEL)
    outs: list[dict[str, torch.Tensor]] = []
    for ids in (spec.example_inputs[0], (spec.example_inputs[0] + 1) % 512):
        seen: dict[str, torch.Tensor] = {}
        hooks = [m.register_forward_hook(lambda _m, _a, o, _n=n: seen.__setitem__(_n.replace(".", "/"), o))
                 for n, m in spec.module.named_modules() if n]
        with torch.no_grad():
            spec.module(ids)
        for h in hooks:
            h.remove()
        outs.append(seen)
    constant = {p for p in outs[0] if torch.equal(outs[0][p], outs[1][p])}
    leaves = leaf_paths()
    eager, ort = timed_modules(bundles["cpu"]) & leaves, timed_modules(bundles["ort"]) & leaves
    assert ort == eager - constant
    assert constant & leaves  # the model has such a module, so this test checks something


@pytest.mark.slow
@pytest.mark.parametrize("key", ["xla", "ort"])
def test_activations_agree_with_eager(bundles, key):
    """Each stack's module sketches (its own numerics) match eager's at the same sampled positions."""
    from porter.analysis.accuracy import load_sketches, sampled_rel_l2

    ref, got = load_sketches(bundles["cpu"]), load_sketches(bundles[key])
    common = set(ref.samples) & set(got.samples)
    assert len(common) >= len(leaf_paths()) - 1
    errors = {k: sampled_rel_l2(ref.samples[k], got.samples[k], ref.summaries[k]["numel"])[0] for k in sorted(common)}
    bad = {k: e for k, e in errors.items() if not e <= ACT_REL_L2_TOL}
    assert not bad, bad


def test_tpu_target_is_unavailable_with_one_line_reason(tmp_path):
    done = run_porter("capture", MODEL, "--on", "tpu", "-o", str(tmp_path / "b"), timeout=300)
    assert done.returncode == 3, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "TPU" in lines[0] and "jax" in lines[0]
    assert not (tmp_path / "b").exists()


@pytest.mark.slow
def test_ort_fused_nchwc_nodes_keep_their_modules(tmp_path):
    """On the CNN, ORT's CPU provider fuses Conv+BN+ReLU and renames nodes for its NCHWc
    layout (``relu_nchwc``); those must still map to modules. Only the root's flatten
    (a reshape in the model's own forward) is outside every module."""
    done = run_porter("capture", "cnn", "--on", "cpu:ort", "-o", str(tmp_path / "b"), "--steps", "3", "--repeats", "5")
    assert done.returncode == 0, done.stderr[-3000:]
    ops = pd.read_parquet(tmp_path / "b" / "ops.parquet")
    untagged = ops.loc[(ops["module"] == "") & (ops["device_us"] > 0), "framework_op"]
    assert set(untagged) <= {"aten::view", "aten::flatten", "aten::reshape"}, set(untagged)
    assert any(n.endswith("_nchwc") for n in ops["name"])  # the layout pass ran, so this checks the mapping


def test_each_stack_runs_single_modules_and_ops_or_says_why():
    """A stack offers run_call/run_op by defining their *_impl; one that does not gets a reason
    as data (callers report it), never a missing method reached at run time."""
    import torch

    from porter.core.errors import PorterError
    from porter.targets import STACK_MODULES, StackMissing, get_stack

    for name in STACK_MODULES:
        stack = get_stack(name)
        assert bool(stack.no_module_runs) != hasattr(stack, "run_call_impl"), name
        assert bool(stack.no_op_runs) != hasattr(stack, "run_op_impl"), name
    ort = get_stack("ort")
    assert ort.no_op_runs.startswith("ONNX Runtime runs exported graphs")  # its own reason is kept
    missing = StackMissing("ghost", "not installed")
    assert missing.no_module_runs == "porter has no single-module runner for StackMissing"
    with pytest.raises(PorterError, match="the ghost stack does not run single ops: porter has no single-op runner"):
        missing.run_op(torch.ops.aten.add.Tensor, (torch.ones(1), torch.ones(1)), {}, "cpu")


def test_ort_sessions_follow_the_thread_policy():
    """A live pair runs one intra-op thread per side (porter/runtime/threads.py); ORT's sessions
    take torch's count, so ORT is single-threaded under the policy too (its own default is a
    spinning pool per core, which a CPU-time headline would count once per thread)."""
    from porter.runtime.threads import applied, decide
    from porter.targets import get_stack

    stack = get_stack("ort")
    prepared = stack.prepare(load_model(MODEL), "cpu")
    before = torch.get_num_threads()
    with applied(decide(None, 2, "1")):
        assert stack._session(prepared).get_session_options().intra_op_num_threads == 1
    assert stack._session(prepared).get_session_options().intra_op_num_threads == before == torch.get_num_threads()
