"""The bench runner on real stacks: a target that fails is recorded and the others go on."""

from __future__ import annotations

import pytest

from porter.bench.runner import RunnerOptions, run_case
from porter.bench.suite import Case
from tests.bench_support import REPO

QUICK = RunnerOptions(warmup=1, min_samples=5, max_samples=12, budget_s=2, min_sample_s=0.005, threads=1)


@pytest.mark.slow
def test_failing_target_is_recorded_and_the_rest_is_timed_interleaved():
    model = f"{REPO / 'tests' / 'models' / 'bad_models.py'}:custom_op_model"
    case = Case("custom", model, ("cpu:inductor", "cpu"), shapes=((4, 8),))
    inductor, eager = run_case(case, QUICK)
    assert inductor.status == "failed" and inductor.target == "cpu:inductor" and inductor.samples_s == []
    assert "host_only" in inductor.error or "porter_test" in inductor.error, inductor.error
    assert inductor.device_class == eager.device_class  # the failure joins its series
    assert eager.status == "ok" and eager.target == "cpu:eager" and eager.number >= 1
    assert 5 <= len(eager.samples_s) <= 12 and all(s > 0 for s in eager.samples_s)
    assert eager.spec["shapes"] == [[4, 8]]


def test_bad_case_shapes_fail_that_target_only():
    case = Case("mlp", "mlp", ("cpu",), shapes=((2, 3), (4, 5)))
    (r,) = run_case(case, QUICK)
    assert r.status == "failed" and "2 shapes given for 1 tensor inputs" in r.error
