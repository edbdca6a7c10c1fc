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
