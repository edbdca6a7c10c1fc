"""`porter regress`: for each series, is the newest run slower than its history?

A series regresses only when all of these hold (so it does not cry wolf):
1. the newest run passed the noise admission check (unstable runs never alert);
2. against a baseline of up to BASELINE_WINDOW earlier stable runs, the newest run's raw
   samples differ by a two-sided Mann-Whitney U test, significant at ALPHA after Holm's
   correction across all series tested;
3. the bootstrap interval of median(new)/median(baseline) lies entirely above
   1 + threshold (5% unless the case sets its own);
4. the run before it also met 2 and 3 against the same baseline (the step was seen in
   two consecutive runs; the baseline excludes both). A newest run meeting 2 and 3 alone
   is a "suspect": the next run confirms or clears it.

A series whose noise hides a threshold-sized change is not judged, and says so rather than
pass: its newest run failed the noise admission check ("unstable"), or its stable runs are too
few because the earlier ones were unstable, or the ratio's interval is wider than +/- the
threshold ("too noisy"). When no series regresses but any cannot be judged, the report's
verdict is "cannot judge" and `porter regress` exits EXIT_CANNOT_JUDGE (4), never 0: on a
busy 2-core machine all 14 built-in series were unstable and the old report said
"0 confirmed regression(s)" with exit 0.

Change points are found over the per-run medians of the whole history
(stats.change_points) and name the run where each step started.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from porter.bench import stats
from porter.bench.records import OK
from porter.bench.store import HistoryEntry

ALPHA = 0.05
BASELINE_WINDOW = 10  # the newest runs before the ones under test: the history a change is judged against
MIN_BASELINE_RUNS = 3  # fewer: the run-to-run spread is unknown, so no verdict

REGRESSION, SUSPECT, IMPROVEMENT, OK_STATUS = "regression", "suspect", "improvement", "ok"
UNSTABLE, TOO_NOISY, FAILED, YOUNG = "unstable", "too noisy", "failed", "too little history"
CANNOT_JUDGE = (UNSTABLE, TOO_NOISY)  # series statuses whose noise hides a threshold-sized change
QUIET = "rerun on a quiet machine"

# `porter regress` exit codes (2 is every command's user error, 3 an unavailable target)
EXIT_OK, EXIT_REGRESSION, EXIT_CANNOT_JUDGE = 0, 1, 4
VERDICT_REGRESSION, VERDICT_CANNOT_JUDGE, VERDICT_OK = "regression", "cannot judge", "ok"


@dataclass
class Comparison:
    """One run against the baseline."""

    run_id: str
    started_at: str
    ratio: float  # median(run) / median(baseline)
    ci_low: float
    ci_high: float
    p: float
    p_holm: float = math.nan
    beyond: bool = False  # the whole interval beyond the practical threshold, slower side

    def significant(self) -> bool:
        return self.p_holm < ALPHA

    def slower(self) -> bool:
        return self.significant() and self.beyond


@dataclass
class SeriesVerdict:
    series: str
    status: str
    threshold: float
    reason: str = ""
    newest: Comparison | None = None
    previous: Comparison | None = None
    baseline_runs: list[str] = field(default_factory=list)
    change_points: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class RegressReport:
    verdicts: list[SeriesVerdict]
    methods: dict[str, str] = field(default_factory=lambda: {
        "test": stats.TEST_METHOD, "interval": stats.RATIO_CI_METHOD, "change_points": stats.CHANGE_POINT_METHOD,
        "rule": f"regression = Holm-adjusted p < {ALPHA}, interval entirely above 1 + threshold, in the newest run "
                f"and the one before it, against up to {BASELINE_WINDOW} earlier stable runs",
    })

    @property
    def regressions(self) -> list[SeriesVerdict]:
        return [v for v in self.verdicts if v.status == REGRESSION]

    @property
    def cannot_judge(self) -> list[SeriesVerdict]:
        return [v for v in self.verdicts if v.status in CANNOT_JUDGE]

    @property
    def verdict(self) -> str:
        """regression (any confirmed), else cannot judge (any series too noisy), else ok."""
        if self.regressions:
            return VERDICT_REGRESSION
        return VERDICT_CANNOT_JUDGE if self.cannot_judge else VERDICT_OK

    @property
    def exit_code(self) -> int:
        return {VERDICT_REGRESSION: EXIT_REGRESSION, VERDICT_CANNOT_JUDGE: EXIT_CANNOT_JUDGE}.get(self.verdict, EXIT_OK)

    def summary(self) -> str:
        """The report's one line, as the terminal and the bench page say it."""
        n, noisy = len(self.verdicts), len(self.cannot_judge)
        if self.verdict == VERDICT_REGRESSION:
            more = f"; {noisy} more could not be judged (too noisy)" if noisy else ""
            return f"{len(self.regressions)} confirmed regression(s) in {n} series{more}"
        if self.verdict == VERDICT_CANNOT_JUDGE:
            rest = "" if noisy == n else ", no confirmed regression among the rest"
            return (f"cannot judge: {noisy} of {n} series too noisy to resolve their threshold (unstable runs or "
                    f"run-to-run drift){rest}; {QUIET}")
        return f"0 confirmed regression(s) in {n} series"

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON: unknown numbers (NaN) become null."""
        return _finite({"verdict": self.verdict, "summary": self.summary(), "exit_code": self.exit_code,
                        "regressions": len(self.regressions), "cannot_judge": len(self.cannot_judge),
                        "methods": self.methods, "series": [asdict(v) for v in self.verdicts]})


def _finite(v: Any) -> Any:
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_finite(x) for x in v]
    return v


def _compare(entry: HistoryEntry, baseline: list[HistoryEntry], threshold: float) -> Comparison:
    ratio, lo, hi = stats.ratio_of_medians_ci(entry.samples_s, [b.samples_s for b in baseline])
    pooled = [s for b in baseline for s in b.samples_s]
    return Comparison(entry.run_id, entry.started_at, ratio, lo, hi, stats.mann_whitney_p(entry.samples_s, pooled),
                      beyond=lo > 1 + threshold)


def _change_points(ok_runs: list[HistoryEntry], threshold: float) -> list[dict[str, Any]]:
    meds = [sorted(e.samples_s)[len(e.samples_s) // 2] for e in ok_runs]
    return [{"run_id": ok_runs[c.index].run_id, "started_at": ok_runs[c.index].started_at, "index": c.index,
             "ratio": c.ratio, "p": c.p} for c in stats.change_points(meds, threshold)]


def _judge(series: str, history: list[HistoryEntry]) -> SeriesVerdict:
    """Comparisons and preliminary status of one series (Holm-adjusted later, across series)."""
    threshold = history[-1].threshold if history else 0.05
    verdict = SeriesVerdict(series, YOUNG, threshold)
    ok_runs = [e for e in history if e.status == OK and e.samples_s]
    verdict.change_points = _change_points(ok_runs, threshold)
    if history and history[-1].status != OK:
        verdict.status, verdict.reason = FAILED, f"the newest run failed: {history[-1].error}"
        return verdict
    if not ok_runs:
        verdict.reason = "no successful runs"
        return verdict
    newest = ok_runs[-1]
    if newest.unstable:
        verdict.status = UNSTABLE
        verdict.reason = (f"cannot judge: the newest run's median is known to +/-{stats.ci_half_width(newest.samples_s) * 100:.1f}% "
                          f"(IQR/median {stats.spread(newest.samples_s) * 100:.0f}%); resolving a {threshold * 100:.0f}% "
                          f"change needs +/-{threshold * 50:.1f}% and IQR/median <= {stats.UNSTABLE_SPREAD * 100:.0f}%; {QUIET}")
        return verdict
    earlier = ok_runs[:-1]
    previous = earlier[-1] if earlier else None
    candidates = earlier[:-1]
    baseline = [e for e in candidates if not e.unstable][-BASELINE_WINDOW:]
    if len(baseline) < MIN_BASELINE_RUNS:
        if len(candidates) >= MIN_BASELINE_RUNS:  # the history is long enough: its noise left too few
            verdict.status = TOO_NOISY
            verdict.reason = (f"cannot judge: {len(candidates) - len(baseline)} of the {len(candidates)} runs before the "
                              f"last two were unstable, leaving {len(baseline)} baseline runs of the {MIN_BASELINE_RUNS} "
                              f"a verdict needs; {QUIET}")
        else:
            verdict.reason = f"{len(baseline)} baseline runs; a verdict needs {MIN_BASELINE_RUNS} before the last two"
        return verdict
    verdict.baseline_runs = [b.run_id for b in baseline]
    verdict.newest = _compare(newest, baseline, threshold)
    if previous is not None and not previous.unstable:
        verdict.previous = _compare(previous, baseline, threshold)
    return verdict


def _holm(comparisons: list[Comparison]) -> None:
    for c, adj in zip(comparisons, stats.holm([c.p for c in comparisons])):
        c.p_holm = adj


def _finish(v: SeriesVerdict) -> None:
    new, prev = v.newest, v.previous
    if new is None:
        return
    if new.slower() and prev is not None and prev.slower():
        v.status = REGRESSION
        v.reason = (f"{(new.ratio - 1) * 100:+.1f}% in the newest run and {(prev.ratio - 1) * 100:+.1f}% in the one before, "
                    f"both beyond +{v.threshold * 100:.0f}% and significant")
    elif new.slower():
        v.status, v.reason = SUSPECT, f"{(new.ratio - 1) * 100:+.1f}% in the newest run only: the next run confirms or clears it"
    elif new.significant() and new.ci_high < 1 - v.threshold:
        v.status, v.reason = IMPROVEMENT, f"{(new.ratio - 1) * 100:+.1f}%, beyond -{v.threshold * 100:.0f}%"
    elif (new.ci_high - new.ci_low) / 2 > v.threshold:  # a threshold-sized step would fit inside it unseen
        v.status = TOO_NOISY
        v.reason = (f"cannot judge: {(new.ratio - 1) * 100:+.1f}% [{(new.ci_low - 1) * 100:+.1f}%, "
                    f"{(new.ci_high - 1) * 100:+.1f}%] is wider than +/-{v.threshold * 100:.0f}%: the runs vary more "
                    f"than the threshold; {QUIET}")
    else:
        v.status = OK_STATUS
        v.reason = ("within the threshold or not significant: "
                    f"{(new.ratio - 1) * 100:+.1f}% [{(new.ci_low - 1) * 100:+.1f}%, {(new.ci_high - 1) * 100:+.1f}%]")


def regress(histories: dict[str, list[HistoryEntry]]) -> RegressReport:
    """Verdicts for every series (see module doc); Holm runs over each family of tests."""
    verdicts = [_judge(series, hist) for series, hist in sorted(histories.items())]
    _holm([v.newest for v in verdicts if v.newest is not None])
    _holm([v.previous for v in verdicts if v.previous is not None])
    for v in verdicts:
        _finish(v)
    return RegressReport(verdicts)


__all__ = ["ALPHA", "BASELINE_WINDOW", "CANNOT_JUDGE", "EXIT_CANNOT_JUDGE", "EXIT_OK", "EXIT_REGRESSION", "Comparison",
           "RegressReport", "SeriesVerdict", "regress"]
