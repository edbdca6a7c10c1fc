"""Render a diagnosis into report.html, report.md, summary.md and report.json.

Reading: load_report_model() is the ONLY place that knows diagnosis.json's field names
(see docs/diagnosis.md); everything after it reads porter.report_model dataclasses.
Rendering: Jinja2 templates packaged in porter/templates/ (autoescape on for HTML,
because kernel and op names hold `<`, `>`, `&`); charts are inline SVG from porter.charts.
Writing: each file is replaced atomically.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from porter.atomic import atomic_write_text
from porter.errors import PorterError
from porter.report_model import Accuracy, AccuracyRow, Fix, Note, ReportModel, Side, Spread, TimeRow
from porter.units import fmt_days, fmt_pct, fmt_ratio, fmt_sci, fmt_us

DIAGNOSIS = "diagnosis.json"
FORMATS = ("html", "md", "json")
OUTPUTS = {"html": ("report.html",), "md": ("report.md", "summary.md"), "json": ("report.json",)}
TOP_GAPS = 25


# ---------------------------------------------------------------- the adapter

def _get(d: Any, *paths: str, default: Any = None) -> Any:
    """First present value among dotted paths ("end_to_end.ratio"); default when none is."""
    for path in paths:
        cur = d
        for part in path.split("."):
            if isinstance(cur, dict) and part in cur:
                cur = cur[part]
            else:
                cur = None
                break
        if cur is not None:
            return cur
    return default


def _f(v: Any) -> float | None:
    try:
        out = float(v)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def _side(d: dict, manifest: dict) -> Side:
    versions = _get(d, "versions", default=None) or _get(manifest, "framework_versions", default={}) or {}
    return Side(
        label=str(_get(d, "label", default="") or _get(manifest, "label", default="")),
        device_name=str(_get(d, "device.name", "device_name", default="") or _get(manifest, "device.name", default="") or "unknown device"),
        device_type=str(_get(d, "device.type", "device_type", default="") or _get(manifest, "device.type", default="")),
        stack=str(_get(d, "stack", default="") or _get(manifest, "stack", default="") or "recorded trace"),
        profiler=str(_get(d, "profiler", default="") or _get(manifest, "profiler", default="")),
        versions={str(k): str(v) for k, v in dict(versions).items()},
        timing=str(_get(d, "timing.method", "timing_method", "timing", default="") or ""),
        total_us=_f(_get(d, "total_us", "device_us", "device_us_total", default=None))
        or _f(_get(manifest, "stats.device_us_total", default=0.0))
        or 0.0,
    )


def _time_rows(rows: Iterable[dict]) -> list[TimeRow]:
    out = []
    for r in rows or []:
        out.append(
            TimeRow(
                key=str(_get(r, "key", "name", "group", "module", "op_class", default="")),
                source_us=_f(_get(r, "source_us", default=0.0)) or 0.0,
                target_us=_f(_get(r, "target_us", default=0.0)) or 0.0,
                roofline_us=_f(_get(r, "roofline_us", "roofline.target_us", default=None)),
                op_class=str(_get(r, "op_class", default="")),
                module=str(_get(r, "module", default="")),
            )
        )
    return out


def _accuracy(d: dict | None) -> Accuracy | None:
    if not d:
        return None
    rows = []
    for r in _get(d, "modules", "per_module", default=[]) or []:
        tol = _f(_get(r, "tolerance", default=None))
        local = _f(_get(r, "local", "local_error", default=None))
        rows.append(
            AccuracyRow(
                module=str(_get(r, "module", default="")),
                local=local,
                propagated=_f(_get(r, "propagated", "propagated_error", default=None)),
                tolerance=tol,
                introduces=bool(_get(r, "introduces", default=(local is not None and tol is not None and local > tol))),
            )
        )
    passed = _get(d, "passed", default=None)
    return Accuracy(
        metric=str(_get(d, "metric", default="relative L2")),
        verdict=str(_get(d, "verdict", default="") or ("within tolerance" if passed else "outside tolerance" if passed is False else "not judged")),
        passed=None if passed is None else bool(passed),
        tolerance_note=str(_get(d, "tolerance_note", "tolerance.why", default="")),
        rows=rows,
    )


def _fixes(rows: Iterable[dict]) -> list[Fix]:
    out = []
    for r in rows or []:
        eff = _get(r, "effort_days", "effort.days", default=None) or [0, 0]
        lo, hi = (eff, eff) if isinstance(eff, (int, float)) else (eff[0], eff[-1])
        out.append(
            Fix(
                title=str(_get(r, "title", "fix", default="")),
                where=str(_get(r, "where", default="")),
                why=str(_get(r, "why", default="")),
                first_step=str(_get(r, "first_step", default="")),
                effort_days=(float(lo), float(hi)),
                recoverable_us=_f(_get(r, "recoverable_us", "benefit_us", default=None)),
                confidence=str(_get(r, "confidence", default="")),
                kind=str(_get(r, "kind", default="time")),
                category=str(_get(r, "category", "op_class", default="")),
            )
        )
    return out


def _notes(d: dict) -> list[Note]:
    out = []
    for side, kind in (("source", "unmatched on source"), ("target", "unmatched on target")):
        for r in _get(d, f"unmatched.{side}", default=[]) or []:
            us = _f(_get(r, "device_us", "us", default=None))
            out.append(
                Note(
                    kind=kind,
                    name=str(_get(r, "name", "key", default="")),
                    where=str(_get(r, "module", "where", default="")),
                    source_us=us if side == "source" else None,
                    target_us=us if side == "target" else None,
                    detail=str(_get(r, "detail", "reason", default="")),
                )
            )
    for r in _get(d, "portability", "notes", default=[]) or []:
        out.append(
            Note(
                kind=str(_get(r, "kind", default="note")),
                name=str(_get(r, "name", default="")),
                where=str(_get(r, "module", "where", default="")),
                source_us=_f(_get(r, "source_us", default=None)),
                target_us=_f(_get(r, "target_us", default=None)),
                detail=str(_get(r, "detail", default="")),
            )
        )
    return out


def _method(d: dict) -> list[tuple[str, str]]:
    m = _get(d, "method", default={}) or {}
    if isinstance(m, list):
        return [(str(a), str(b)) for a, b in m]
    return [(str(k).replace("_", " "), v if isinstance(v, str) else json.dumps(v, sort_keys=True)) for k, v in m.items()]


def model_from_diagnosis(d: dict) -> ReportModel:
    """Map a parsed diagnosis.json onto the ReportModel (the field names live here only)."""
    inputs = _get(d, "inputs", default={}) or {}
    source = _side(_get(d, "source", default={}) or {}, _get(inputs, "source", default={}) or {})
    target = _side(_get(d, "target", default={}) or {}, _get(inputs, "target", default={}) or {})
    e2e = _get(d, "end_to_end", default={}) or {}
    ratio_v = _f(_get(e2e, "ratio", "ratio.median", default=None))
    if ratio_v is None:
        ratio_v = target.total_us / source.total_us if source.total_us > 0 else float("nan")
    spread = _get(e2e, "ratio_spread", "spread", default=None) or [None, None]
    time = _get(d, "time", default={}) or {}
    return ReportModel(
        model=str(_get(d, "model", default="") or source.label or "model"),
        mode=str(_get(d, "mode", default="trace")),
        source=source,
        target=target,
        ratio=Spread(
            value=ratio_v,
            lo=_f(spread[0]) if len(spread) > 0 else None,
            hi=_f(spread[-1]) if len(spread) > 1 else None,
            samples=_get(e2e, "samples", "repeats", default=None),
            kind=str(_get(e2e, "spread_kind", default="")),
        ),
        coverage=_f(_get(d, "coverage.target_share", "coverage.target", "coverage", default=None)),
        by_class=_time_rows(_get(time, "by_class", default=[])),
        by_module=_time_rows(_get(time, "by_module", default=[])),
        top_gaps=_time_rows(_get(time, "by_group", "top_gaps", default=[])),
        accuracy=_accuracy(_get(d, "accuracy", default=None)),
        fixes=_fixes(_get(d, "fixes", default=[])),
        notes=_notes(d),
        method=_method(d),
        command=str(_get(d, "command", default="")),
        created_at=str(_get(d, "created_at", default="")),
        porter_version=str(_get(d, "porter_version", default="")),
        warnings=[str(w) for w in _get(d, "warnings", default=[]) or []],
    )


def load_report_model(diagnosis_dir: Path) -> ReportModel:
    """Read DIR/diagnosis.json into a ReportModel; a user-fixable problem raises PorterError."""
    path = Path(diagnosis_dir) / DIAGNOSIS
    if not path.is_file():
        raise PorterError(f"no {DIAGNOSIS} here", path=diagnosis_dir, hint="run `porter diagnose ... -o DIR` first")
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise PorterError(f"unreadable {DIAGNOSIS} ({exc})", path=path) from None
    if not isinstance(data, dict):
        raise PorterError(f"{DIAGNOSIS} is not a JSON object", path=path)
    return model_from_diagnosis(data)


# ---------------------------------------------------------------- rendering

def md_text(v: Any) -> str:
    """Plain text for a Markdown table cell: no raw HTML, no cell breaks, one line."""
    s = str(v).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return s.replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def md_code(v: Any) -> str:
    """A name (kernel, op, module) as a Markdown code span safe inside a table cell."""
    s = str(v).replace("\r", " ").replace("\n", " ").replace("|", "\\|")
    if not s:
        return ""
    fence = "``" if "`" in s else "`"
    return f"{fence} {s} {fence}" if "`" in s else f"`{s}`"


def _sort_key(v: Any) -> str:
    """The data-v attribute a table cell sorts by: the raw number, or '' when unknown."""
    f = _f(v)
    return "" if f is None else repr(f)


def _autoescape(name: str | None) -> bool:
    """Escape everything but the Markdown templates (which use md_text/md_code instead)."""
    return not (name or "").endswith(".md.j2")


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("porter", "templates"),
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
    from porter.report_view import build_charts, parity_text, summary_points

    excess = max(m.target.total_us - m.source.total_us, 0.0)
    return {
        "m": m,
        "points": summary_points(m),
        "parity": parity_text(m),
        "charts": {k: Markup(v) for k, v in build_charts(m).items()},
        "top_gaps": sorted(m.top_gaps, key=lambda r: r.gap_us, reverse=True)[:TOP_GAPS],
        "by_class": sorted(m.by_class, key=lambda r: r.gap_us, reverse=True),
        "excess_us": excess,
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
    from porter.report_view import summary_points

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


def write_reports(diagnosis_dir: Path, formats: Iterable[str] = ("html", "md"), out: Path | None = None) -> list[Path]:
    """Render diagnosis_dir/diagnosis.json and write each file atomically.

    out: a directory (default: diagnosis_dir), or a file path ending in .html/.md/.json
    when exactly one format is asked for (then only that one file is written).
    """
    formats = list(formats)
    m = load_report_model(diagnosis_dir)
    texts = render_all(m, formats)
    dest = Path(out) if out is not None else Path(diagnosis_dir)
    if dest.suffix in (".html", ".md", ".json"):
        if len(formats) != 1 or f".{formats[0]}" != dest.suffix:
            raise PorterError("a file name for -o needs exactly one --format of the same kind", path=dest, hint="or give a directory")
        first = OUTPUTS[formats[0]][0]
        return [atomic_write_text(dest, texts[first])]
    return [atomic_write_text(dest / name, text) for name, text in texts.items()]
