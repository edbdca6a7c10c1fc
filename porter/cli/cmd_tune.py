"""`porter tune`: apply the fix plan's recipes to the target one at a time, measure, keep what holds."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from porter.cli.console import Table, err, fail, out, print_measurement
from porter.core.errors import PorterError


def tune(
    what: str = typer.Argument(..., help="MODEL (built-in name or FILE.py:factory) with --from/--to, or a `porter diagnose` output folder."),
    source: Optional[str] = typer.Option(None, "--from", help="Source target (e.g. cpu); with MODEL."),
    target: Optional[str] = typer.Option(None, "--to", help="Target to tune (e.g. cpu:inductor, xla, cpu:ort); with MODEL."),
    tries: Optional[list[str]] = typer.Option(None, "--try", help="Recipe to try (repeat); default: the fix plan's recipes for the target's stack, or all of them without a diagnosis."),
    budget: float = typer.Option(300.0, "--budget", help="Seconds for the whole tune, compiles included; no measurement starts once it is spent."),
    tolerance: Optional[float] = typer.Option(None, "--tolerance", help="Relative L2 of the output against the source's that a recipe may reach (default: porter's for the model's dtype, 1e-4 for fp32)."),
    out_dir: Path = typer.Option(Path("porter-tune"), "-o", "--out", help="Folder for tune.json, tuned-settings.txt, tuned-bench.toml and the cache."),
    fresh: bool = typer.Option(False, "--fresh", help="Measure again what tune-cache.json in the folder already holds."),
    catalogue: Optional[Path] = typer.Option(None, "--catalogue", help="A fix catalogue TOML merged over the built-in one."),
) -> None:
    """Try the cheap fixes: each recipe applied alone to the target, timed against the untuned target and
    the source (interleaved, one clock), accuracy checked against the source; kept only when its recovery's
    95% interval excludes zero, accuracy holds and the recovery survives Holm's correction over every recipe
    tried; then the best combination (greedy).

    Examples: porter tune transformer --from cpu --to cpu:inductor ; porter tune diag-out/ --budget 120
    """
    from porter.core.atomic import check_output_dir
    from porter.tune.candidates import plan_for
    from porter.tune.run import TuneOptions, tune as run_tune

    try:
        plan = plan_for(what, source, target, tuple(tries or ()), catalogue)
        check_output_dir(out_dir)
        err.print(f"tune {plan.model}: {plan.source} -> {plan.target} ({plan.stack}); {len(plan.candidates)} recipes, "
                  f"budget {budget:g} s", highlight=False, markup=False)
        with err.status("tuning", spinner="dots") as status:
            doc = run_tune(plan, out_dir, TuneOptions(budget_s=budget, tolerance=tolerance, fresh=fresh),
                           progress=lambda msg: (status.update(msg), err.print(f"  {msg}", highlight=False, markup=False)))
    except PorterError as exc:
        fail(exc)
    except KeyboardInterrupt:
        err.print(f"interrupted: what was measured is in {out_dir}/tune-cache.json and {out_dir}/tune.json; rerun to resume",
                  highlight=False, markup=False)
        raise typer.Exit(130)
    show(doc, out_dir)


def show(doc: dict, out_dir: Path) -> None:
    """The candidates as one table, the best combination, the findings, what was written."""
    table = Table("recipe", "fix", "estimated", "ratio [95%]", "recovered us [95%]", "rel_l2", "kept", title=None)
    for c in doc["candidates"]:
        est = f"{c['estimated_us']:.0f} us" if c.get("estimated_us") is not None else "-"
        if c.get("status") == "measured":
            m, r, a = c["measured"], c["recovered_us"], c["accuracy"]
            ratio = f"x{m['ratio']:.3f} [{m['ci95'][0]:.3f}, {m['ci95'][1]:.3f}]"
            rec = f"{r['value']:+.0f} [{r['ci95'][0]:+.0f}, {r['ci95'][1]:+.0f}]"
            rel = f"{a['rel_l2']:.1e}" if a.get("rel_l2") is not None else "-"
        else:
            ratio, rec, rel = c.get("status", ""), "", ""
        table.add_row(c["recipe"], c["fix_id"], est, ratio, rec, rel, "yes" if c.get("kept") else "no")
    out.print(table)
    for c in doc["candidates"]:
        out.print(f"  {c['recipe']}: {c['why']}", highlight=False, markup=False, soft_wrap=True)
    untuned = next((c["untuned"] for c in doc["candidates"] if c.get("untuned")), None)
    if untuned:
        out.print(f"untuned target: x{untuned['ratio']:.3f} [{untuned['ci95'][0]:.3f}, {untuned['ci95'][1]:.3f}] of the source",
                  highlight=False, markup=False)
    best = doc.get("best")
    if best:
        m = best["measured"]
        out.print(f"best ({doc['search'].split(':')[0]}): {' + '.join(best['recipes'])}: x{m['ratio']:.3f} "
                  f"[{m['ci95'][0]:.3f}, {m['ci95'][1]:.3f}] of the source", highlight=False, markup=False)
    else:
        out.print("best: nothing kept; the untuned target stays as it is", highlight=False, markup=False)
    for f in doc.get("findings") or []:
        out.print(f"  finding: {f}", highlight=False, markup=False, soft_wrap=True)
    if doc.get("not_runnable_here"):
        out.print(f"  not run here: {', '.join(r['recipe'] for r in doc['not_runnable_here'])} "
                  f"({doc['not_runnable_here'][0]['why']})", highlight=False, markup=False, soft_wrap=True)
    print_measurement(doc.get("policy"))
    written = ["tune.json"] + (["tuned-settings.txt", "tuned-bench.toml"] if best else [])
    out.print(f"wrote {', '.join(str(out_dir / w) for w in written)}", highlight=False, markup=False)
