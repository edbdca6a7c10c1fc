"""`porter bench` and `porter regress`: a cross-stack benchmark with a history.

``suite`` (what to run) -> ``runner`` + ``steps`` (interleaved timing on the targets'
own Stacks) -> ``records`` -> ``store`` (SQLite / PostgreSQL) and ``parquet`` (one file
per run) -> ``regress`` (verdicts per series, using ``stats``) -> ``report`` (the page,
rendered by reports/bench_page.py). ``context`` names series and records what ran where.
"""
