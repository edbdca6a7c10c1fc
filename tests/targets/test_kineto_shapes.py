"""Op shapes from one profiled step, times from steps profiled without them
(porter.targets.kineto_shapes), on real captures: eager and inductor, and a model whose steps
run different ops (the fallback to one pass with shapes)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch
from torch import nn

from porter.capture.models import from_factory
from porter.targets import get_stack
from porter.targets.kineto_shapes import _steps, copy_shapes


class _Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(32, 64)
        self.act = nn.GELU(approximate="tanh")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.fc(x)) * 2.0


class _Alternating(_Mlp):
    """Every other forward adds an op: the steps do not all run the shapes step's ops."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        y = super().forward(x)
        return y.relu() if self.calls % 2 else y


def _profile(stack_name: str, module: nn.Module, tmp_path, steps: int = 3):
    stack = get_stack(stack_name)
    spec = from_factory("mlp", lambda: (module, (torch.randn(4, 32),)), "tests")
    prepared = stack.prepare(spec, "cpu")
    path = stack.profile(prepared, steps=steps, warmup=1, raw_dir=tmp_path)
    return prepared, path


def _args_by_step(path):
    return [[(e["name"], json.dumps((e.get("args") or {}).get("Input Dims"))) for e in step]
            for step in _steps(json.loads(path.read_text())["traceEvents"])]


@pytest.mark.parametrize("stack_name", ["eager", "inductor"])
def test_every_timed_step_carries_the_shapes_step_shapes(stack_name, tmp_path):
    prepared, path = _profile(stack_name, _Mlp().eval(), tmp_path)
    assert prepared.info["shapes_from"].startswith("one step profiled with shapes")
    assert not (tmp_path / "shapes.json").exists()
    steps = _args_by_step(path)
    assert len(steps) == 3 and steps[0] == steps[1] == steps[2]
    dims = dict(steps[0])
    mm = next(k for k in dims if k in ("aten::addmm", "aten::mm", "aten::linear"))
    assert "[4, 32]" in dims[mm]  # the linear's real input, copied from the shapes step
    assert json.loads(path.read_text()).get("record_shapes") == 1


def test_steps_that_run_other_ops_are_profiled_again_with_shapes(tmp_path):
    prepared, path = _profile("eager", _Alternating().eval(), tmp_path, steps=4)
    assert prepared.info["shapes_from"].startswith("every timed step")
    shaped = [sum(d != "null" for _, d in step) for step in _args_by_step(path)]
    assert len(shaped) == 4 and all(n > 0 for n in shaped)


def test_copy_keeps_the_timed_trace_ids_and_times(tmp_path):
    """Kernels link to their op by the timed trace's own ids; only shape arguments move."""
    stack = get_stack("eager")
    spec = from_factory("mlp", lambda: (_Mlp().eval(), (torch.randn(4, 32),)), "tests")
    prepared = stack.prepare(spec, "cpu")
    shaped, timed = tmp_path / "s.json", tmp_path / "t.json"
    stack._profiled_steps(prepared, 1, shaped, shapes=True)
    stack._profiled_steps(prepared, 2, timed, shapes=False)
    before = [(e["ts"], e.get("dur"), (e.get("args") or {}).get("External id")) for step in
              _steps(json.loads(timed.read_text())["traceEvents"]) for e in step]
    assert all("Input Dims" not in (e.get("args") or {}) for step in
               _steps(json.loads(timed.read_text())["traceEvents"]) for e in step)
    done = copy_shapes(shaped, timed)
    assert done.complete and (done.steps, done.matched) == (2, 2)
    after_events = [e for step in _steps(json.loads(timed.read_text())["traceEvents"]) for e in step]
    assert [(e["ts"], e.get("dur"), e["args"].get("External id")) for e in after_events] == before
    assert pd.Series(["Input Dims" in e["args"] for e in after_events]).mean() > 0.9
