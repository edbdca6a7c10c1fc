"""The runtime's time outside every module gets fixes of its own kind (issue 25 item 4), and a
roofline a measured time beats becomes the observed bound (item 3)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from porter.analysis.fixplan import outside_fix_groups
from porter.analysis.fixrank import rank_fixes
from porter.analysis.plan import plan_fixes
from porter.analysis.roofline import observed_bound


def _fc1(target_us: float) -> dict:
    """An addmm at 10% of its roofline, as the Linear-ReLU-Linear -> cpu:inductor case had."""
    return dict(group_id="g0", module="fc1", op_class="matmul", framework_op="aten::addmm", source_us=300.0,
                target_us=target_us, source_kernels=1, target_kernels=1, flops=np.nan, bytes=np.nan, dtype="fp32",
                input_shapes="", target_device_type="cpu", target_stack="inductor-cpp", host_us=0.0,
                roofline_us=0.1 * target_us, recoverable_us=0.9 * target_us, demonstrated_us=0.0)


def _table(fc1_us: float) -> pd.DataFrame:
    outside = outside_fix_groups({}, {"guard checks": 205.0, "graph wrapper and runtime dispatch": 727.0},
                                 target_device_type="cpu", target_stack="inductor-cpp", source_device_type="cpu")
    return pd.concat([pd.DataFrame([_fc1(fc1_us)]).assign(outside=""), outside], ignore_index=True)


def test_wrapper_and_guard_time_get_their_own_fixes_and_a_faster_op_only_headroom():
    fixes, plan = plan_fixes([{**f.__dict__, "days": list(f.days), "group_ids": list(f.group_ids)}
                              for f in rank_fixes(_table(fc1_us=250.0))])
    by_id = {f["fix_id"]: f for f in fixes}
    wrapper, guards = by_id["cut-graph-wrapper"], by_id["cut-guard-checks"]
    assert wrapper["closes_gap_us"] == pytest.approx(727.0) and guards["closes_gap_us"] == pytest.approx(205.0)
    assert "cpp_wrapper" in wrapper["first_step"] and "fullgraph=True" in guards["first_step"]  # inductor-cpp's own step
    assert wrapper["title"].endswith("compiled graph wrapper and dispatch in (no module)")
    assert guards["title"].endswith("TorchDynamo Cache Lookup in (no module)")
    # fc1 is faster on the target: only a headroom fix, closing nothing, out of the plan
    kernel = [f for f in fixes if "g0" in f["group_ids"]]
    assert kernel and all(f["opportunity"] == "headroom" and f["closes_gap_us"] == 0.0 for f in kernel)
    assert not any(f["in_plan"] for f in kernel) and all(f["beyond_parity_us"] > 0 for f in kernel)
    assert sorted(plan.fixes) == sorted([wrapper["rank"], guards["rank"]])
    assert plan.total_us == pytest.approx(932.0) and plan.days == (1.0, 4.0)
    # no other catalogue fix takes the runtime's rows
    assert all(f["fix_id"] in ("cut-graph-wrapper", "cut-guard-checks") for f in fixes
               if any(str(g).startswith("outside:") for g in f["group_ids"]))


def test_a_slower_op_closes_at_most_its_gap():
    fixes = rank_fixes(_table(fc1_us=1000.0))  # 700 us slower, 900 us recoverable to its roofline
    kernel = next(f for f in fixes if f.group_ids == ("g0",))
    assert kernel.opportunity == "regression" and kernel.measured_gap_us == pytest.approx(700.0)
    assert kernel.closes_gap_us == pytest.approx(700.0) and kernel.beyond_parity_us == pytest.approx(200.0)


def test_a_ceiling_the_target_beats_becomes_the_observed_bound():
    rl, basis = observed_bound(np.array([50.0, 250.0, np.nan]), np.array([100.0, 100.0, 100.0]),
                               np.array([True, True, False]))
    assert rl[:2].tolist() == [50.0, 100.0] and basis.tolist() == ["ceiling", "observed", "unknown"]


def _runtime(source_between: float, target_between: float, root_target: float | None = None) -> dict:
    """A live pair's runtime per step: 10 profiled steps a side, the target's profiler slowdown
    1.25x (scale 0.8), the source's none; the target's wrapper 7270 us and guards 2050 us profiled."""
    from porter.analysis.outside import runtime_step

    stats = {"target_outside_modules_by_kind_us": {"graph wrapper and runtime dispatch": 7270.0, "guard checks": 2050.0}}
    sides = {"source": {"step_scale": 1.0, "profiled_steps": 10}, "target": {"step_scale": 0.8, "profiled_steps": 10}}
    counted = {"source_between_us": source_between, "target_between_us": target_between}
    kinds = (7270.0 + 2050.0) / 10 * 0.8  # 745.6 us per unprofiled step
    return runtime_step(stats, sides, counted, {"source": 0.0, "target": kinds if root_target is None else root_target})


def test_the_runtime_is_compared_with_the_eager_sources_time_between_ops():
    """Eager's Python and dispatch lie between its ops; the compiled wrapper is the target's
    counterpart. Llama -> inductor read the wrapper +1.56 ms per step "largest loss" against
    nothing, beside a source spending 3.5 ms per step between ops."""
    from porter.analysis.outside import source_runtime_share

    rt = _runtime(source_between=3500.0, target_between=350.0)
    assert rt["target"]["kinds_us"]["graph wrapper and runtime dispatch"] == pytest.approx(581.6)
    assert rt["target"]["total_us"] == pytest.approx(745.6 + 350.0) and rt["source"]["total_us"] == 3500.0
    assert rt["gap_us"] == pytest.approx(1095.6 - 3500.0) and rt["root_is_runtime"]
    assert source_runtime_share(rt) == 1.0  # the source's runtime covers all of the target's
    rows = outside_fix_groups({}, {"guard checks": 2050.0, "graph wrapper and runtime dispatch": 7270.0},
                              target_device_type="cpu", target_stack="inductor-cpp", source_device_type="cpu",
                              runtime_share=source_runtime_share(rt))
    assert (rows["demonstrated_us"] == 0.0).all() and (rows["source_us"] == rows["target_us"]).all()
    assert not [f for f in rank_fixes(rows) if f.closes_gap_us > 0]  # no measured gap for the runtime's fixes

    # a source with little time between ops: the target's own between-ops time is matched first,
    # the rest of the source's runtime against the kinds, in proportion
    rt = _runtime(source_between=500.0, target_between=200.0)
    share = source_runtime_share(rt)
    assert share == pytest.approx(300.0 / 745.6)
    rows = outside_fix_groups({}, {"guard checks": 2050.0, "graph wrapper and runtime dispatch": 7270.0},
                              target_device_type="cpu", target_stack="inductor-cpp", source_device_type="cpu",
                              runtime_share=share).set_index("outside")
    assert rows.loc["guard checks", "demonstrated_us"] == pytest.approx(2050.0 * (1 - share))
    fixes = {f.fix_id: f for f in rank_fixes(rows.reset_index())}
    assert fixes["cut-graph-wrapper"].closes_gap_us == pytest.approx(7270.0 * (1 - share))
    # without a live pair's runtime (recorded traces) the source's own kinds are the comparison, as before
    rows = outside_fix_groups({"guard checks": 50.0}, {"guard checks": 2050.0}, target_device_type="cpu",
                              target_stack="inductor-cpp", source_device_type="cpu")
    assert rows["demonstrated_us"].tolist() == [2000.0]


def test_a_root_row_with_the_models_own_ops_stays_a_row():
    """The root's row is the runtime's only when the model's own ops at the root are a small
    share of it: a forward that computes at the root keeps its row in the module rankings."""
    assert _runtime(3500.0, 350.0, root_target=745.6 + 50.0)["root_is_runtime"]  # 6% the model's
    assert not _runtime(3500.0, 350.0, root_target=745.6 + 400.0)["root_is_runtime"]
    from porter.analysis.outside import runtime_step as rs

    sides = {"source": {"step_scale": 1.0, "profiled_steps": 1}, "target": {"step_scale": 1.0, "profiled_steps": 1}}
    counted = {"source_between_us": 2700.0, "target_between_us": 350.0}
    stats = {"target_outside_modules_by_kind_us": {"guard checks": 380.0, "graph wrapper and runtime dispatch": 560.0}}
    # stock Llama's root: 5 us of the model's slicing on the source, the wrapper and guards on the target
    assert rs(stats, sides, counted, {"source": 5.0, "target": 940.0})["root_is_runtime"]
    assert not rs(stats, sides, counted, {"source": 200.0, "target": 940.0})["root_is_runtime"]
    from porter.analysis.outside import runtime_step

    assert runtime_step({}, {}, None, {}) is None  # a recorded pair: no sides, no runtime
