"""The `porter bench report` page: a typed model filled by porter.bench.report, rendered
to bench.html (self-contained: inline CSS and SVG) and bench.md from reports/templates/.

The page holds numbers already computed, each with the name of its method; this module
only lays them out (it never imports porter.bench, which may load a model stack).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from markupsafe import Markup

from porter.core.atomic import atomic_write_text
from reports.bench_charts import TrendPoint, trend_chart
from reports.render import environment

PAGES = {"bench.html": "bench.html.j2", "bench.md": "bench.md.j2"}


@dataclass
class StackRow:
    target: str
    device_class: str
    status: str  # ok / failed
    median_ms: float = float("nan")
    low_ms: float = float("nan")
    high_ms: float = float("nan")
    samples: int = 0
    number: int = 1
    unstable: bool = False
    ratio: float = float("nan")  # median / baseline stack's median, same run
    ratio_low: float = float("nan")
    ratio_high: float = float("nan")
    verdict: str = ""  # porter regress status of this series
    reason: str = ""
    error: str = ""


@dataclass
class CaseTable:
    case: str
    about: str  # model, dtype, mode, shapes
    run: str  # the run the rows come from
    baseline: str  # the target ratios are taken to
    rows: list[StackRow] = field(default_factory=list)


@dataclass
class SeriesTrend:
    series: str
    verdict: str
    reason: str
    points: list[TrendPoint] = field(default_factory=list)
    change_points: list[tuple[int, str]] = field(default_factory=list)


@dataclass
class BenchPage:
    title: str
    store: str
    generated_at: str
    runs: int
    regressions: int
    verdict: str = "ok"  # porter regress's: regression / cannot judge / ok (porter.bench.regress)
    summary: str = ""  # its one line, e.g. "cannot judge: 14 of 14 series too noisy ...; rerun on a quiet machine"
    cannot_judge: int = 0  # series too noisy to judge
    environment: list[tuple[str, str]] = field(default_factory=list)
    methods: list[tuple[str, str]] = field(default_factory=list)
    cases: list[CaseTable] = field(default_factory=list)
    trends: list[SeriesTrend] = field(default_factory=list)


def render_page(page: BenchPage) -> dict[str, str]:
    """File name -> text for bench.html and bench.md."""
    env = environment()
    charts = [Markup(trend_chart(t.points, t.change_points, title=t.series)) for t in page.trends]
    return {name: env.get_template(tpl).render(p=page, charts=charts) for name, tpl in PAGES.items()}


def write_bench_report(page: BenchPage, out_dir: Path) -> list[Path]:
    out_dir = Path(out_dir)
    return [atomic_write_text(out_dir / name, text) for name, text in render_page(page).items()]


__all__ = ["BenchPage", "CaseTable", "SeriesTrend", "StackRow", "TrendPoint", "render_page", "write_bench_report"]
