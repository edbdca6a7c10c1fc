"""`porter bench` (run, report, import: porter/bench/) and `porter regress`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from typer.core import TyperGroup

from porter.cli.console import Table, err, escape_markup, fail, out, print_measurement
from porter.core.errors import PorterError
from porter.core.units import fmt_us
from porter.runtime.policy import WARMUP

if TYPE_CHECKING:
    from porter.bench.records import CaseResult, RunRecord


class BenchGroup(TyperGroup):
    """`porter bench SUITE|MODEL ...` is short for `porter bench run SUITE|MODEL ...`."""

    def parse_args(self, ctx, args):  # type: ignore[no-untyped-def]
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


DB_HELP = "History store: a SQLite file or postgresql://user:pass@host/db (default: $PORTER_BENCH_DB or ~/.local/share/porter/bench.sqlite)."


def bench_run(
    what: str = typer.Argument(..., help="SUITE.toml, `builtin` (porter's models on every stack) or one model (built-in name or FILE.py:factory)."),
    on: Optional[list[str]] = typer.Option(None, "--on", help="Target to run on (repeat: --on cpu --on xla); overrides the suite's stacks."),
    db: Optional[str] = typer.Option(None, "--db", help=DB_HELP),
    export: Optional[Path] = typer.Option(None, "--export", help="Folder for the run's Parquet artifact and its log (default: beside a SQLite store, bench.sqlite -> bench-runs/; for PostgreSQL ~/.local/share/porter/bench-runs)."),
    mode: str = typer.Option("inference", "--mode", help="One model: inference or train."),
    dtype: str = typer.Option("float32", "--dtype", help="One model: float32, float64, bfloat16 or float16."),
    threshold: float = typer.Option(0.05, "--threshold", help="One model: practical threshold for regressions (0.05 = 5%)."),
    budget: float = typer.Option(30.0, "--budget", help="Seconds of timing per case (all targets together), after compiling."),
    min_samples: int = typer.Option(10, "--min-samples", help="Samples per target before the stopping rule applies."),
    max_samples: int = typer.Option(200, "--max-samples", help="Most samples per target."),
    target_ci: float = typer.Option(0.01, "--target-ci", help="Stop once every median's 95% interval is within +/- this fraction."),
    warmup: int = typer.Option(WARMUP, "--warmup", help="Untimed steps per target after the first (compiling) one (the measurement policy's default, as capture and diagnose)."),
    threads: Optional[int] = typer.Option(None, "--threads", help="Intra-op threads: 1 = one per stack (the default, PORTER_THREADS=1, as diagnose); N > 1 = torch's N and the other stacks' own pools."),
    confirm: bool = typer.Option(False, "--confirm", help="Re-run suspect series (slow in this run only) at once, to confirm or clear them."),
) -> None:
    """Run a benchmark suite (interleaved across targets, adaptive sample count), store it, export it.

    Examples: porter bench builtin --on cpu --on cpu:inductor --on xla --on cpu:ort ;
    porter bench suite.toml ; porter bench mlp --on cpu --on cpu:inductor
    """
    from porter.pipeline.preflight import check_run

    stacks = tuple(on or ())
    try:
        check_run(None if what == "builtin" or what.endswith(".toml") else what, stacks)  # before torch loads
    except PorterError as exc:
        fail(exc)
    from porter.bench.parquet import export_run
    from porter.bench.store import Store, runs_dir, safe_url
    from porter.capture.quiet import third_party_output
    from porter.bench.suite import BUILTIN_STACKS, builtin_suite, load_suite, single_case, with_stacks

    try:
        if what == "builtin":
            suite = builtin_suite(stacks or BUILTIN_STACKS)
        elif what.endswith(".toml"):
            suite = with_stacks(load_suite(Path(what)), stacks)
        else:
            suite = single_case(what, stacks or ("cpu",), mode=mode, dtype=dtype, threshold=threshold)
        store = Store(db)  # a bad suite or store fails here, before torch loads
        export = export or runs_dir(store.url)
        from porter.bench.runner import RunnerOptions, run_suite

        opts = RunnerOptions(warmup=warmup, min_samples=min_samples, max_samples=max_samples, target_ci=target_ci,
                             budget_s=budget, threads=threads)
        with third_party_output() as native:  # the stacks' warnings (FutureWarning, USDT lines) to the run's log
            run = run_suite(suite, opts, progress=lambda msg: err.print(f"porter: {msg}", highlight=False, markup=False))
        store.write_run(run)
        path = export_run(run, export)
        log = native.save_as(path.with_suffix(".log"))
        rerun = None
        if confirm:
            from porter.bench.confirm import confirm_suspects

            rerun = confirm_suspects(suite, run, store, opts, progress=lambda msg: err.print(f"porter: {msg}", highlight=False, markup=False))
            if rerun is not None:
                export_run(rerun, export)
    except PorterError as exc:
        fail(exc)
    print_run(suite.name, run)
    out.print(f"stored in {safe_url(store.url)}; artifact {path}", highlight=False, markup=False, soft_wrap=True)
    if log is not None:
        out.print(f"third-party output (warnings, native lines) in {log}", highlight=False, markup=False, soft_wrap=True)
    if confirm:
        out.print(f"re-ran {len(rerun.results)} suspect series as run {rerun.run_id[:12]}: see `porter regress`" if rerun
                  else "no suspect series to re-run", highlight=False, markup=False)


def print_run(suite: str, run: RunRecord) -> None:
    """The run's table (median, interval, ratio to the case's first target in the same run) and,
    once, the measurement policy it ran under."""
    from porter.bench.stats import cross_stack_ratio_ci

    table = Table(title=f"porter bench {suite}: run {run.run_id[:12]}", title_justify="left")
    for col in ("case", "target", "median", "95% interval", "samples", "ratio (95%)", "note"):
        table.add_column(col, overflow="fold")
    base: dict[str, CaseResult] = {}
    for r in run.results:
        if r.status != "ok":
            table.add_row(r.case, r.target, "-", "-", "-", "-", f"failed: {r.error}")
            continue
        b = base.setdefault(r.case, r)
        ratio = "1" if b is r else "x{:.3f} [{:.3f}-{:.3f}]".format(*cross_stack_ratio_ci(r.samples_s, b.samples_s,
                                                                                       run.context.get("measurement")))
        lo, hi = r.ci_s
        table.add_row(r.case, r.target, fmt_us(r.median_s * 1e6), f"{fmt_us(lo * 1e6)} - {fmt_us(hi * 1e6)}",
                      f"{len(r.samples_s)} x {r.number}", ratio,
                      "unstable (never alerts)" if r.unstable else "")
    out.print(table)
    print_measurement(run.context.get("measurement"))


def bench_report(
    db: Optional[str] = typer.Option(None, "--db", help=DB_HELP),
    out_dir: Path = typer.Option(Path("bench-report"), "-o", "--out", help="Folder for bench.html and bench.md."),
    baseline: Optional[str] = typer.Option(None, "--baseline", help="Target the ratios are taken to (default: each case's first)."),
) -> None:
    """Render the history: per case a table of stacks, per series a trend chart (bench.html, bench.md)."""
    from porter.bench.report import write_report
    from porter.bench.store import Store

    try:
        paths = write_report(Store(db), out_dir, baseline)
    except PorterError as exc:
        fail(exc)
    for p in paths:
        out.print(str(p), highlight=False)


def bench_import(
    files: list[Path] = typer.Argument(..., help="Parquet files written by `porter bench` (--export)."),
    db: Optional[str] = typer.Option(None, "--db", help=DB_HELP),
) -> None:
    """Load exported runs into a store (runs already there are left alone)."""
    from porter.bench.parquet import read_run
    from porter.bench.store import Store

    try:
        store = Store(db)
        for f in files:
            run = read_run(f)
            added = store.write_run(run)
            out.print(f"{f}: run {run.run_id[:12]} {'imported' if added else 'already in the store'}",
                      highlight=False, soft_wrap=True)
    except PorterError as exc:
        fail(exc)


def regress(
    db: Optional[str] = typer.Option(None, "--db", help=DB_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the verdicts as JSON."),
) -> None:
    """Judge each benchmark series' newest run against its history.

    A regression must be significant (Mann-Whitney U, Holm-corrected), beyond the practical
    threshold (bootstrap interval of the ratio of medians) and seen in two consecutive runs.
    A series too noisy to resolve its threshold (unstable newest run, unstable history, or a
    ratio interval wider than +/- the threshold) is "cannot judge", never a pass.

    Exit codes: 0 = every series judged, no confirmed regression; 1 = a confirmed regression;
    4 = cannot judge: no confirmed regression, but at least one series too noisy (rerun on a
    quiet machine); 2 = a user error (bad store).
    """
    import json

    from porter.bench.regress import CANNOT_JUDGE, REGRESSION, VERDICT_OK
    from porter.bench.regress import regress as judge
    from porter.bench.store import Store

    try:
        report = judge(Store(db).histories())
    except PorterError as exc:
        fail(exc)
    if as_json:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2, allow_nan=False) + "\n")
    else:
        for v in report.verdicts:
            style = ("bold red" if v.status == REGRESSION else "yellow" if v.status in ("suspect", "failed", *CANNOT_JUDGE)
                     else "dim")
            out.print(f"[{style}]{v.status:>18}[/]  {escape_markup(v.series)}  {escape_markup(v.reason)}", soft_wrap=True)
        style = "green" if report.verdict == VERDICT_OK else "bold red" if report.regressions else "bold yellow"
        out.print(f"[{style}]{escape_markup(report.summary())}[/]", highlight=False, soft_wrap=True)
    if report.exit_code:
        raise typer.Exit(report.exit_code)
