"""ReportModel -> text: Jinja2 templates packaged in reports/templates/, plus report.json.

Autoescape is on for every template but the Markdown ones (kernel and op names hold
`<`, `>`, `&`); Markdown cells go through md_text / md_code instead. Charts are SVG
strings from reports.charts, which escape their own text, marked safe here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import asdict
from typing import Any

import jinja2
from markupsafe import Markup

from porter.errors import PorterError
from reports.model import ReportModel
from reports.view import build_charts, parity_text, summary_points
from porter.units import fmt_days, fmt_pct, fmt_ratio, fmt_sci, fmt_us

FORMATS = ("html", "md", "json")
OUTPUTS = {"html": ("report.html",), "md": ("report.md", "summary.md"), "json": ("report.json",)}
TOP_GAPS = 25
TOP_MODULE_ROWS = 30


def md_text(v: Any) -> str:
    """Plain text for a Markdown table cell: no raw HTML, no cell breaks, one line."""
    s = str(v).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return s.replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def md_code(v: Any) -> str:
    """A name (kernel, op, module) as a Markdown code span safe inside a table cell."""
    s = str(v).replace("\r", " ").replace("\n", " ").replace("|", "\\|")
    if not s:
        return ""
    return f"`` {s} ``" if "`" in s else f"`{s}`"


def _sort_key(v: Any) -> str:
    """The data-v attribute a table cell sorts by: the raw number, or '' when unknown."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return ""
    return repr(f) if math.isfinite(f) else ""


def _autoescape(name: str | None) -> bool:
    return not (name or "").endswith(".md.j2")


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("reports", "templates"),
        autoescape=_autoescape,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(
        us=fmt_us, ratio=fmt_ratio, pct=fmt_pct, sci=fmt_sci, days=lambda e: fmt_days(*e),
        mdtext=md_text, code=md_code, v=_sort_key,
    )
    return env


def _context(m: ReportModel) -> dict[str, Any]:
    return {
        "m": m,
        "points": summary_points(m),
        "parity": parity_text(m),
        "charts": {k: Markup(v) for k, v in build_charts(m).items()},
        "top_gaps": sorted(m.top_gaps, key=lambda r: r.gap_us, reverse=True)[:TOP_GAPS],
        "by_class": sorted(m.by_class, key=lambda r: r.gap_us, reverse=True),
        "modules": sorted(m.by_module, key=lambda r: r.gap_us, reverse=True)[:TOP_MODULE_ROWS],
        "excess_us": max(m.target.total_us - m.source.total_us, 0.0),
        "counted": m.counted_fixes(),
    }


def render(m: ReportModel, template: str) -> str:
    return environment().get_template(template).render(**_context(m))


def _jsonable(v: Any) -> Any:
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return v


def render_json(m: ReportModel) -> str:
    """The report model plus its derived totals, for other tools."""
    data = asdict(m)
    data["derived"] = {
        "recoverable_us": m.recoverable_us,
        "projected_ratio": m.projected_ratio,
        "effort_days": list(m.effort_days),
        "summary": [asdict(p) for p in summary_points(m)],
    }
    return json.dumps(_jsonable(data), indent=2, allow_nan=False) + "\n"


def render_all(m: ReportModel, formats: Iterable[str]) -> dict[str, str]:
    """File name -> text for each requested format ('html', 'md', 'json')."""
    out: dict[str, str] = {}
    for fmt in formats:
        if fmt == "html":
            out["report.html"] = render(m, "report.html.j2")
        elif fmt == "md":
            out["report.md"] = render(m, "report.md.j2")
            out["summary.md"] = render(m, "summary.md.j2")
        elif fmt == "json":
            out["report.json"] = render_json(m)
        else:
            raise PorterError(f"unknown report format {fmt!r}", hint=f"use one of {', '.join(FORMATS)} or all")
    return out
