"""porter regress: planted slowdowns are confirmed after two runs, no-change never alerts.

Synthetic histories (tests/bench_support.py) carry a known truth; the recorded history in
fixtures/bench/history holds real runs of tests/models/planted_work.py on this machine.
"""

from __future__ import annotations

import numpy as np
import pytest

from porter.bench.regress import REGRESSION, SUSPECT, regress
from porter.bench.stats import change_points, holm, median_ci, ratio_of_medians_ci
from tests.bench_support import entry, recorded_runs, synthetic_history

SEEDS = range(4)
BASELINE_RUNS = 10


def verdict(history):
    return regress({"series": history}).verdicts[0]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("slowdown", [0.10, 0.30])
def test_planted_slowdown_is_confirmed_after_the_second_run(slowdown, seed):
    history = synthetic_history(seed, BASELINE_RUNS, 2, slowdown)
    first = verdict(history[:-1])
    assert first.status == SUSPECT, first.reason  # one run is never enough
    second = verdict(history)
    assert second.status == REGRESSION, second.reason
    # the reported size is the planted one (to within the synthetic per-run drift)
    assert second.newest.ratio == pytest.approx(1 + slowdown, abs=0.04)
    assert second.newest.p_holm < 0.05 and second.previous.p_holm < 0.05


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("slowdown", [0.0, 0.03])
def test_small_or_no_change_is_not_flagged(slowdown, seed):
    history = synthetic_history(seed, BASELINE_RUNS, 2, slowdown)
    for n in (len(history) - 1, len(history)):
        assert verdict(history[:n]).status not in (REGRESSION, SUSPECT)


@pytest.mark.parametrize("seed", SEEDS)
def test_twenty_no_change_runs_raise_no_alert(seed):
    history = synthetic_history(100 + seed, 20, 0, 0.0)
    for n in range(1, 21):
        assert verdict(history[:n]).status != REGRESSION


def test_recorded_no_change_runs_on_this_machine_raise_no_alert():
    runs = [r for r in recorded_runs() if r.context["planted_slowdown"] == 0.0]
    assert len(runs) == 20
    history = [entry(r) for r in runs]
    for n in range(1, 21):
        assert verdict(history[:n]).status != REGRESSION
    # also with the noise admission check switched off: the run-level bootstrap alone holds
    for e in history:
        e.unstable = False
    for n in range(1, 21):
        assert verdict(history[:n]).status != REGRESSION


def test_recorded_30pct_step_on_this_machine_is_confirmed_only_after_two_runs():
    """Real runs: the planted 30% is confirmed when the admission check is off; 3% and 10%
    drown in this shared machine's run-to-run drift (so they must not be flagged)."""
    runs = recorded_runs()
    base = [entry(r) for r in runs if r.context["planted_slowdown"] == 0.0][:8]
    for slowdown, expected in ((0.03, False), (0.10, False), (0.30, True)):
        planted = [entry(r) for r in runs if r.context["planted_slowdown"] == slowdown][:2]
        history = base + planted
        for e in history:
            e.unstable = False
        assert verdict(history[:-1]).status != REGRESSION
        assert (verdict(history).status == REGRESSION) is expected, (slowdown, verdict(history).reason)


def test_unstable_newest_run_never_alerts():
    history = synthetic_history(3, BASELINE_RUNS, 2, 0.30)
    history[-1].unstable = True
    v = verdict(history)
    assert v.status == "unstable" and v.newest is None


def test_failed_newest_run_is_reported_not_judged():
    history = synthetic_history(4, BASELINE_RUNS, 0, 0.0)
    history[-1].status, history[-1].error, history[-1].samples_s = "failed", "boom", []
    v = verdict(history)
    assert v.status == "failed" and "boom" in v.reason


def test_change_point_names_the_run_where_the_step_started():
    history = synthetic_history(7, 12, 6, 0.20)
    v = verdict(history)
    assert [c["run_id"] for c in v.change_points] == ["run012"]
    assert v.change_points[0]["ratio"] == pytest.approx(1.20, abs=0.03)
    assert verdict(synthetic_history(8, 18, 0, 0.0)).change_points == []


def test_holm_correction_across_series():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    # many series: a p that passes alone is not significant among 20
    histories = {f"s{i}": synthetic_history(200 + i, BASELINE_RUNS, 2, 0.0) for i in range(20)}
    report = regress(histories)
    assert not report.regressions
    raw = [v.newest.p for v in report.verdicts]
    adjusted = [v.newest.p_holm for v in report.verdicts]
    assert all(a >= p for a, p in zip(adjusted, raw))


def test_median_interval_and_ratio_interval():
    samples = [float(i) for i in range(1, 101)]
    lo, hi = median_ci(samples)
    assert 40 <= lo < 50.5 < hi <= 61  # binomial ranks 40 and 61 for n=100
    ratio, rlo, rhi = ratio_of_medians_ci([2 * s for s in samples], [samples, samples])
    assert ratio == pytest.approx(2.0) and rlo < 2.0 < rhi
    assert change_points([1.0] * 10, 0.05) == []


def test_an_all_unstable_recorded_history_cannot_be_judged():
    """The 32 real runs recorded at load 7-9 on this 2-core machine: 31 failed the admission
    check, the newest among them. regress must say it cannot judge (exit 4), not "0 regressions" (exit 0)."""
    from porter.bench.regress import EXIT_CANNOT_JUDGE, UNSTABLE

    runs = recorded_runs()
    assert len(runs) == 32 and sum(r.results[0].unstable for r in runs) == 31 and runs[-1].results[0].unstable
    report = regress({"planted | cpu:x | cpu:eager": [entry(r) for r in runs],
                      "other | cpu:x | cpu:eager": [entry(r) for r in runs[:12]]})
    assert [v.status for v in report.verdicts] == [UNSTABLE, UNSTABLE]
    assert all(v.reason.startswith("cannot judge:") and v.reason.endswith("rerun on a quiet machine")
               for v in report.verdicts)
    assert report.regressions == [] and report.verdict == "cannot judge" and report.exit_code == EXIT_CANNOT_JUDGE == 4
    assert report.summary().startswith("cannot judge: 2 of 2 series too noisy")
    d = report.to_dict()
    assert (d["verdict"], d["exit_code"], d["cannot_judge"], d["regressions"]) == ("cannot judge", 4, 2, 0)


def test_a_drifting_history_of_stable_runs_is_too_noisy_not_ok():
    """Each run alone is tight, but the runs drift by ~10% from one to the next: the ratio's
    interval is wider than +/-5%, so a 5% step would hide in it: too noisy, not ok."""
    from porter.bench.regress import TOO_NOISY

    rng = np.random.default_rng(5)
    history = []
    for i in range(12):
        samples = 0.01 * float(np.exp(rng.normal(0, 0.10))) * np.exp(rng.normal(0, 0.005, 40))
        history.append(entry_of(i, samples))
    assert not any(e.unstable for e in history)
    v = verdict(history)
    assert v.status == TOO_NOISY, v.reason
    assert v.newest is not None and (v.newest.ci_high - v.newest.ci_low) / 2 > 0.05
    assert "wider than +/-5%" in v.reason and v.reason.endswith("rerun on a quiet machine")
    assert regress({"s": history}).exit_code == 4


def test_stable_newest_run_after_unstable_ones_is_too_noisy_to_judge():
    from porter.bench.regress import TOO_NOISY

    history = synthetic_history(21, 8, 0, 0.0)
    for e in history[:-2]:
        e.unstable = True
    v = verdict(history)
    assert v.status == TOO_NOISY and "6 of the 6 runs before the last two were unstable" in v.reason
    # a short history is young, not noisy: exit 0 with no verdict
    young = regress({"s": synthetic_history(22, 3, 0, 0.0)})
    assert young.verdicts[0].status == "too little history" and young.exit_code == 0


def test_a_quiet_history_is_judged_ok_with_exit_0():
    report = regress({"s": synthetic_history(2, BASELINE_RUNS, 2, 0.0)})
    assert report.verdicts[0].status in ("ok", "improvement"), report.verdicts[0].reason
    assert report.verdict == "ok" and report.exit_code == 0
    assert report.summary() == "0 confirmed regression(s) in 1 series"


def entry_of(i: int, samples: list[float]):
    from porter.bench.store import HistoryEntry
    from tests.bench_support import THRESHOLD, admitted

    return HistoryEntry(f"run{i:03d}", f"2026-01-01T00:00:{i:02d}", "ok", not admitted(samples, THRESHOLD), THRESHOLD,
                        [float(x) for x in samples])
