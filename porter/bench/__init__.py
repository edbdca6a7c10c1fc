"""`porter bench` and `porter regress`: a cross-stack benchmark with a history.

``suite`` (what to run) -> ``runner`` + ``steps`` (interleaved timing on the targets'
own Stacks) -> ``records`` -> ``store`` (SQLite / PostgreSQL) and ``parquet`` (one file
per run) -> ``regress`` (verdicts per series, using ``stats``) -> ``report`` (the page,
rendered by reports/bench_page.py). ``context`` names series and records what ran where.

May import: porter.capture, porter.targets (runner and steps only), porter.core.errors,
porter.core.atomic and reports/; never the analysis, the diagnosis pipeline or the CLI. The
history side (store, stats, regress, report, records, parquet, context) imports no torch.
"""
