"""XLA:CPU's asynchronous convolutions: the idle time after one is charged back to it."""

from __future__ import annotations

import pytest

from porter.analysis.align import align
from porter.analysis.async_gaps import MIN_GAP_US, place_async_gaps
from tests.e2e.test_live_identity import _ops


def _xla_cpu(rows: list[tuple[int, int, str, str, str, float, float]]):
    """(op_id, step, module, name, op_class, start_us, device_us) -> an XLA:CPU ops table."""
    ops = _ops([(r[0], -1, r[2], r[3], r[6]) for r in rows])
    return ops.assign(step=[r[1] for r in rows], op_class=[r[4] for r in rows], start_us=[r[5] for r in rows],
                      device_us=[r[6] for r in rows], device_name="XLA:CPU on vm")


def test_idle_time_after_an_async_convolution_is_charged_to_it():
    # per step: a conv whose event returns after 20 us, a small fusion on another thread, 7 ms with
    # nothing running (the conv's work), then the batch norm that waited for it; and a short gap
    # (the executor between thunks) after the norm, which stays uncharged
    rows = []
    for step, base in ((0, 0.0), (1, 10_000.0)):
        i = 10 * step
        rows += [(i, step, "l1/conv1", "convolution.1", "conv", base, 20.0),
                 (i + 1, step, "l1/bn1", "add_rsqrt_fusion", "elementwise", base + 5.0, 30.0),
                 (i + 2, step, "l1/bn1", "multiply_fusion", "elementwise", base + 7035.0, 200.0),
                 (i + 3, step, "l1/relu", "maximum", "elementwise", base + 7235.0 + MIN_GAP_US / 2, 100.0)]
    ops = _xla_cpu(rows)
    g = place_async_gaps(ops)
    t = g.ops.set_index("op_id")["device_us"]
    assert t.loc[0] == pytest.approx(20 + 7000) and t.loc[10] == pytest.approx(20 + 7000)  # 35 -> 7035 idle
    assert t.loc[[1, 2, 3]].tolist() == [30.0, 200.0, 100.0]  # the others keep their own events
    assert g.placed_us == pytest.approx(14_000) and g.gaps == 2
    # in a live pair the conv's module then carries its work, not 20 us of it
    al = align(ops.assign(device_us=0.0, host_us=ops["device_us"]), ops, identity=True)
    assert al.stats["target_async_gap_us"] == pytest.approx(14_000)
    assert al.target_times.values.loc[[0, 10]].tolist() == pytest.approx([7020.0, 7020.0])


def test_other_stacks_and_idle_time_without_a_launching_op_pass_through():
    rows = [(0, 0, "a", "add", "elementwise", 0.0, 10.0), (1, 0, "b", "mul", "elementwise", 5000.0, 10.0)]
    ops = _xla_cpu(rows)
    g = place_async_gaps(ops)  # no matmul or conv before the idle time: nothing launched it
    assert g.placed_us == 0 and g.ops["device_us"].tolist() == [10.0, 10.0]
    eager = ops.assign(device_name="", device_us=0.0)
    assert place_async_gaps(eager).ops is eager
