"""`porter bench report`: the store's history -> the cross-stack page (reports/bench_page.py).

Per case, the newest run that has it: one row per target with the median, its interval
and the ratio to a baseline target measured in the same run (samples interleaved, so the
ratio is free of run-to-run drift). Per series, the trend over all runs with the
`porter regress` verdict, suspect/regressing runs and change points marked.
"""

from __future__ import annotations

from pathlib import Path

from porter.bench import stats
from porter.bench.context import SeriesKey
from porter.bench.records import OK, RunRecord, now_iso
from porter.bench.regress import REGRESSION, SUSPECT, RegressReport, regress
from porter.bench.store import Store, safe_url
from porter.core.errors import PorterError
from reports.bench_page import BenchPage, CaseTable, SeriesTrend, StackRow, TrendPoint, write_bench_report


def _run_label(started_at: str, run_id: str) -> str:
    return f"{started_at[:16].replace('T', ' ')} {run_id[:6]}"


def _case_table(run: RunRecord, case: str, baseline: str | None, verdicts: dict[str, tuple[str, str]]) -> CaseTable:
    results = [r for r in run.results if r.case == case]
    ok = [r for r in results if r.status == OK and r.samples_s]
    base = next((r for r in ok if r.target == baseline), ok[0] if ok else None)
    spec = results[0].spec
    about = f"{spec.get('model')}, {spec.get('dtype')}, {spec.get('mode')}" + (
        f", shapes {spec.get('shapes')}" if spec.get("shapes") else "")
    table = CaseTable(case, about, _run_label(run.started_at, run.run_id), base.target if base else "-")
    for r in results:
        verdict, reason = verdicts.get(r.key.text, ("", ""))
        row = StackRow(r.target, r.device_class, r.status, verdict=verdict, reason=reason, error=r.error)
        if r.status == OK and r.samples_s:
            lo, hi = r.ci_s
            row.median_ms, row.low_ms, row.high_ms = r.median_s * 1e3, lo * 1e3, hi * 1e3
            row.samples, row.number, row.unstable = len(r.samples_s), r.number, r.unstable
            if base is not None:
                row.ratio, row.ratio_low, row.ratio_high = stats.cross_stack_ratio_ci(r.samples_s, base.samples_s,
                                                                                        run.context.get("measurement"))
        table.rows.append(row)
    return table


def _trend(series: str, store_history: list, verdict) -> SeriesTrend:
    ok = [e for e in store_history if e.status == OK and e.samples_s]
    marks = {}
    if verdict.status == REGRESSION:
        marks = {verdict.newest.run_id: "regression", verdict.previous.run_id: "regression"}
    elif verdict.status == SUSPECT:
        marks = {verdict.newest.run_id: "suspect"}
    points = []
    for e in ok:
        lo, hi = stats.median_ci(e.samples_s)
        med = sorted(e.samples_s)[len(e.samples_s) // 2]
        points.append(TrendPoint(_run_label(e.started_at, e.run_id), med * 1e3, lo * 1e3, hi * 1e3,
                                 marks.get(e.run_id, "unstable" if e.unstable else "")))
    cps = [(c["index"], f"step {(c['ratio'] - 1) * 100:+.0f}% from run {c['run_id'][:6]}") for c in verdict.change_points]
    return SeriesTrend(series, verdict.status, verdict.reason, points, cps)


def _environment_rows(run: RunRecord) -> list[tuple[str, str]]:
    env, ctx = run.environment, run.context
    rows = [("host", f"{env.get('host')} ({env.get('os')}, Python {env.get('python')})"),
            ("CPU", f"{env.get('cpu_model')} x {env.get('cpu_count')}"),
            ("versions", ", ".join(f"{k} {v}" for k, v in sorted(env.get("versions", {}).items())) or "-"),
            ("drivers / firmware", "; ".join(f"{k}: {v}" for k, v in env.get("drivers", {}).items()) or "none found (CPU only)")]
    for target, dev in sorted(env.get("devices", {}).items()):
        rows.append((f"device of {target}", ", ".join(f"{k} {v}" for k, v in sorted(dev.items()) if k != "error")))
    load = ctx.get("load_average") or []
    measurement = ctx.get("measurement") or {}
    rows += [("measurement policy", str(measurement.get("summary") or "not recorded (a run before porter.runtime.policy)")
              + (f"; {measurement['oversubscription']}" if measurement.get("oversubscribed") else "")),
             ("threads", str(ctx.get("threads"))),
             ("load average (1/5/15 min) before / after", f"{' '.join(f'{x:.2f}' for x in load)} / "
              f"{' '.join(f'{x:.2f}' for x in ctx.get('load_average_after') or [])}"),
             ("clocks", ", ".join(f"{k} {v}" for k, v in ctx.get("clocks", {}).items()) or "not readable here"),
             ("model code commits", "; ".join(f"{k}: {v or 'not in git'}" for k, v in ctx.get("model_commits", {}).items()))]
    return rows


def build_page(store: Store, baseline: str | None = None, report: RegressReport | None = None) -> BenchPage:
    """The page model for the store's whole history (see module doc)."""
    runs = store.runs()
    if not runs:
        raise PorterError("the benchmark store holds no runs yet", hint=f"run `porter bench` first ({safe_url(store.url)})")
    histories = store.histories()
    report = report or regress(histories)
    by_series = {v.series: v for v in report.verdicts}
    verdicts = {v.series: (v.status, v.reason) for v in report.verdicts}
    newest = store.load_run(runs[-1].id)
    cases: dict[str, CaseTable] = {}
    for row in reversed(runs):  # each case from the newest run that has it
        run = newest if row.id == newest.run_id else None
        names = {SeriesKey.parse(s).case for s, h in histories.items() if any(e.run_id == row.id for e in h)}
        for name in sorted(names - set(cases)):
            run = run or store.load_run(row.id)
            cases[name] = _case_table(run, name, baseline, verdicts)
    trends = [_trend(s, histories[s], by_series[s]) for s in sorted(histories)]
    methods = [("median interval", stats.MEDIAN_CI_METHOD), ("ratio interval", stats.RATIO_CI_METHOD),
               ("test", stats.TEST_METHOD), ("regression rule", report.methods["rule"]),
               ("noise admission", stats.ADMISSION_METHOD), ("change points", stats.CHANGE_POINT_METHOD),
               ("cross-stack ratio", "same run, samples interleaved across targets (A B C, B C A, ...); "
                                     "95% percentile bootstrap of the ratio of medians, widened for drift "
                                     "between runs as the diagnose headline is (porter.core.stats.with_between_run)")]
    return BenchPage(newest.suite, safe_url(store.url), now_iso()[:19].replace("T", " ") + " UTC", len(runs),
                     len(report.regressions), report.verdict, report.summary(), len(report.cannot_judge),
                     _environment_rows(newest), methods, [cases[c] for c in sorted(cases)], trends)


def write_report(store: Store, out_dir: Path, baseline: str | None = None) -> list[Path]:
    return write_bench_report(build_page(store, baseline), out_dir)


__all__ = ["build_page", "write_report"]
