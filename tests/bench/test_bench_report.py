"""porter bench report: the page marks what regress found and states its methods."""

from __future__ import annotations

import re

from porter.bench.records import CaseResult, RunRecord
from porter.bench.report import build_page, write_report
from porter.bench.store import Store
from tests.bench_support import synthetic_history


def store_with_step(path) -> Store:
    """12 runs of two targets; the second target slows by 30% in the last 3 runs."""
    base = synthetic_history(11, 12, 0, 0.0)
    slowed = synthetic_history(12, 9, 3, 0.30)
    store = Store(path)
    for i, (a, b) in enumerate(zip(base, slowed)):
        results = [
            CaseResult("mlp<&>", "cpu:eager", "cpu:Test CPU", {"model": "mlp", "threshold": 0.05, "dtype": "float32",
                       "mode": "inference"}, samples_s=a.samples_s, number=3),
            CaseResult("mlp<&>", "cpu:inductor", "cpu:Test CPU", {"model": "mlp", "threshold": 0.05}, samples_s=[
                2 * s for s in b.samples_s], number=3),
            CaseResult("mlp<&>", "cpu:ort", "cpu:Test CPU", {"model": "mlp", "threshold": 0.05}, "failed",
                       "export failed <here>"),
        ]
        store.write_run(RunRecord(f"r{i:02d}{'0' * 10}", "unit", f"2026-01-01T00:{i:02d}:00", f"2026-01-01T00:{i:02d}:30",
                                  {"host": "h", "cpu_model": "Test CPU", "versions": {"torch": "2.x"}},
                                  {"load_average": [1.0, 1.0, 1.0], "threads": 1}, results))
    return store


def test_page_marks_regression_change_point_and_failures(tmp_path):
    store = store_with_step(tmp_path / "h.sqlite")
    page = build_page(store, baseline="cpu:eager")
    assert page.regressions == 1 and page.runs == 12
    verdicts = {t.series.split(" | ")[2]: t for t in page.trends}
    assert verdicts["cpu:inductor"].verdict == "regression"
    assert verdicts["cpu:eager"].verdict not in ("regression", "suspect")
    assert verdicts["cpu:ort"].verdict == "failed"
    assert [i for i, _ in verdicts["cpu:inductor"].change_points] == [9]
    (case,) = page.cases
    rows = {r.target: r for r in case.rows}
    assert rows["cpu:eager"].ratio == 1.0
    assert 2.3 < rows["cpu:inductor"].ratio < 2.9 and rows["cpu:inductor"].ratio_low < rows["cpu:inductor"].ratio
    paths = write_report(store, tmp_path / "out", baseline="cpu:eager")
    html = (tmp_path / "out" / "bench.html").read_text()
    assert [p.name for p in paths] == ["bench.html", "bench.md"]
    assert "mlp&lt;&amp;&gt;" in html and "mlp<&>" not in html  # names are escaped
    assert "export failed &lt;here&gt;" in html
    assert len(re.findall(r'class="run regression"', html)) == 2  # the two consecutive slow runs
    assert html.count('class="change-point"') == 1
    assert re.search(r'id="fig-regressions">1<', html)
    assert "<script" not in html and "src=\"http" not in html  # self-contained
    md = (tmp_path / "out" / "bench.md").read_text()
    assert "Holm" in md and "bootstrap" in md and "| `cpu:inductor` |" in md
