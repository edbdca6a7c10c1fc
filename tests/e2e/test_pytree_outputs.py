"""Stock transformers models from the CLI: any output pytree on every stack, the same module
paths on both sides, ORT's module outputs the tensors eager records, and a failure that
names only a bundle on disk (issue 24, items 5 and 7).

Models: a stock LlamaForCausalLM (returns CausalLMOutputWithPast with a DynamicCache) and a
stock BertModel (SDPA attention, returns a ModelOutput), built from tiny configs with random
weights (tests/models/library_models.py); BERT with eager attention (bert_small) too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from porter.targets.outputs import leaf_outputs, output_leaves
from tests.conftest import run_porter

MODELS = Path(__file__).parents[1] / "models"
LIBRARY = MODELS / "library_models.py"
FAILING = MODELS / "failing_models.py"
FAST = ("--steps", "3", "--repeats", "3", "--confirm", "0", "--no-report")  # nothing here is about confirmation


def _diagnose(model: str, target: str, out: Path) -> dict:
    r = run_porter("diagnose", f"{LIBRARY}:{model}", "--from", "cpu", "--to", target, "-o", str(out), *FAST)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads((out / "diagnosis.json").read_text())


@dataclass
class _Out:  # a dataclass torch's pytree does not know
    logits: torch.Tensor
    extra: dict


def test_output_leaves_flattens_any_pytree_and_the_root_forward_only_while_asked():
    a, b, c = torch.ones(2), torch.zeros(3), torch.full((1,), 2.0)
    assert [t.shape for t in output_leaves(_Out(a, {"x": None, "y": [b, (c, 3)]}))] == [a.shape, b.shape, c.shape]
    assert output_leaves((None, object(), "s")) == ()

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(2, 2)

        def forward(self, x: torch.Tensor) -> _Out:
            return _Out(self.fc(x), {"cache": object(), "none": None, "h": [x]})

    net, x = Net(), torch.randn(1, 2)
    with leaf_outputs(net):
        got = net(x)
        assert isinstance(got, tuple) and len(got) == 2 and torch.equal(got[1], x)
        assert isinstance(net.fc(x), torch.Tensor)  # submodules untouched
    assert isinstance(net(x), _Out) and "forward" not in vars(net)


@pytest.mark.slow
@pytest.mark.parametrize("target", ["xla", "cpu:inductor", "cpu:ort"])
def test_stock_llama_diagnoses_on_every_stack_with_the_same_module_paths(target, tmp_path):
    d = _diagnose("llama_tiny", target, tmp_path / "d")
    rows = d["by_module"]
    source = {r["key"] for r in rows if r["source_us"] > 0}
    on_target = {r["key"] for r in rows if r["target_us"] > 0}
    assert {"model/layers/0/self_attn/q_proj", "model/layers/1/mlp/down_proj", "lm_head"} <= on_target, sorted(on_target)
    assert on_target <= source, sorted(on_target - source)  # no '0/model/...' the source never ran
    assert len(on_target) >= 0.8 * len(source)
    assert d["alignment"]["stats"]["groups"] >= 20
    # the target's time is in matched groups or is the runtime's, outside every module (inductor's
    # guards and graph wrapper: porter.analysis.outside), never left unexplained
    stats = d["alignment"]["stats"]
    assert d["alignment"]["coverage"]["target"] + stats.get("target_unmatched_outside_modules_share", 0.0) > 0.98
    assert d["accuracy"]["suspects"] == []
    # each side's runtime per step, like for like: its kinds outside every module (per profiled
    # step, less the profiler's slowdown) and its time between ops (porter.analysis.outside)
    runtime, counted, sides = d["headline"]["runtime"], d["headline"]["ops_step"], d["headline"]["sides"]
    for role in ("source", "target"):
        kinds = stats.get(f"{role}_outside_modules_by_kind_us") or {}
        per = sides[role]["step_scale"] / sides[role]["profiled_steps"]
        assert runtime[role]["kinds_us"] == pytest.approx({k: v * per for k, v in kinds.items() if v})
        assert runtime[role]["between_us"] == pytest.approx(max(counted[f"{role}_between_us"], 0.0))
        assert runtime[role]["total_us"] == pytest.approx(sum(runtime[role]["kinds_us"].values()) + runtime[role]["between_us"])
    if target != "cpu:inductor":
        return
    assert runtime["target"]["kinds_us"].get("graph wrapper and runtime dispatch", 0.0) > 0
    # the runtime's root row is no module's: out of by_module's rankings, marked so
    root = [r for r in d["by_module"] if r["key"] == ""]
    assert runtime["root_is_runtime"]  # stock Llama's root holds a few us of slicing beside the wrapper
    assert root and all(r["runtime"] is True for r in root)
    # the runtime's fixes close only what the target's runtime spends beyond the source's
    share = min(max(runtime["source"]["total_us"] - runtime["target"]["between_us"], 0.0)
                / sum(runtime["target"]["kinds_us"].values()), 1.0)
    wrapper = stats["target_outside_modules_by_kind_us"]["graph wrapper and runtime dispatch"]
    fix = next((f for f in d["fixes"] if f["fix_id"] == "cut-graph-wrapper"), None)
    if share >= 1.0:
        assert fix is None, fix  # eager's time between ops matches all the wrapper's: nothing to close
    else:
        assert fix is not None and fix["measured_gap_us"] == pytest.approx(wrapper * (1 - share), rel=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("model", ["bert_small", "bert_stock"])
def test_clean_bert_on_ort_flags_no_accuracy_suspect(model, tmp_path):
    acc = _diagnose(model, "cpu:ort", tmp_path / "d")["accuracy"]
    assert acc["suspects"] == []
    rows = {r["module"]: r for r in acc["modules"]}
    query = next(m for m in rows if m.endswith("encoder/layer/0/attention/self/query"))
    assert rows[query]["propagated_rel_l2"] < 1e-5  # the linear's own output on both sides
    assert len(rows) >= 20


@pytest.mark.slow
def test_a_failed_target_names_only_a_bundle_that_is_on_disk(tmp_path):
    out = tmp_path / "d"
    r = run_porter("diagnose", f"{FAILING}:unique_model", "--from", "cpu", "--to", "xla", "-o", str(out), *FAST)
    assert r.returncode == 2
    line = r.stderr.strip().splitlines()[-1]
    assert "aten::_unique2" in line, line
    named = [w.rstrip(";,") for w in line.split() if str(tmp_path) in w]
    assert named == [str(out / "failed-target")], line
    assert json.loads((out / "failed-target" / "manifest.json").read_text())["status"] == "failed"
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # the scratch folders are gone
