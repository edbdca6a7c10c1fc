"""ReportModel -> text: Jinja2 templates packaged in reports/templates/, plus report.json.

Autoescape is on for every template but the Markdown ones (kernel and op names hold
`<`, `>`, `&`); Markdown cells go through md_text / md_code instead. Charts are SVG
strings from reports.charts, which escape their own text, marked safe here.
"""

from __future__ import annotations

import json
import re
import math
from collections.abc import Iterable
from dataclasses import asdict
from typing import Any

import jinja2
from markupsafe import Markup

from porter.core.errors import PorterError
from porter.core.suggest import hint_with
from reports.model import ReportModel
from reports.basis import overhead_text
from reports.view import (build_charts, fix_total_note, losses_and_wins, not_measured, parity_text, plain_name,
                          plain_fix, plan_ranks, provisional_prefix, side_titles, summary_points, where_label)
from porter.core.units import elide, fmt_days, fmt_pct, fmt_ratio, fmt_sci, fmt_us

FORMATS = ("html", "md", "json")
OUTPUTS = {"html": ("report.html", "summary.html"), "md": ("report.md", "summary.md"), "json": ("report.json",)}
TOP_GAPS = 25
TOP_MODULE_ROWS = 30
OP_SHAPES_HTML = 50  # shown before the "Show all" button
OP_SHAPES_MD = 30
BREAK_AFTER = ("/", ",", "_", ".", ":")  # where a long name may wrap in a table cell


# what Markdown would read as raw HTML (a tag, comment or declaration) or as an entity; anything
# else (`->`, `<=`, `a & b`) is literal there and stays as typed, so the .md reads as plain text too
MD_TAG = re.compile(r"<(?=[A-Za-z/!?])")
MD_ENTITY = re.compile(r"&(?=#?[A-Za-z0-9]+;)")


def md_text(v: Any) -> str:
    """Plain text for a Markdown table cell: no raw HTML, no cell breaks, one line; a name past
    DISPLAY_CHARS elided with a marker (diagnosis.json keeps it whole). Escaped for Markdown (a
    backslash), never for HTML: `->` stays `->`, not `-&gt;`."""
    s = MD_ENTITY.sub(r"\\&", MD_TAG.sub(r"\\<", elide(str(v))))
    return s.replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def md_code(v: Any) -> str:
    """A name (kernel, op, module) as a Markdown code span safe inside a table cell (elided past
    DISPLAY_CHARS)."""
    s = elide(str(v)).replace("\r", " ").replace("\n", " ").replace("|", "\\|")
    if not s:
        return ""
    return f"`` {s} ``" if "`" in s else f"`{s}`"


def html_breakable(v: Any) -> Markup:
    """A name, escaped, with <wbr> after '/', ',', '_', '.', ':' so a narrow cell wraps it there
    and never inside a word; elided past DISPLAY_CHARS with a marker."""
    text = str(Markup.escape(elide(str(v))))
    for ch in BREAK_AFTER:
        text = text.replace(ch, ch + "<wbr>")
    return Markup(text)


def html_shapes(v: Any) -> Markup:
    """Input shapes, escaped, that wrap only between tensors: one tensor never splits over lines."""
    return Markup(str(Markup.escape(elide(str(v)))).replace("],", "],<wbr>"))


def unprefixed(text: str, prefix: str) -> str:
    """`text` without a leading `prefix` (a card's detail line under a value that already says it)."""
    return text[len(prefix):].lstrip(" :,") if prefix and text.startswith(prefix) and text != prefix else text


def signed_us(us: float | None) -> str:
    """A gap with its sign: '+1.20 ms' (target slower), '-3.00 us' (target faster)."""
    text = fmt_us(us)
    return "+" + text if us is not None and us == us and us > 0 else text


def _sort_key(v: Any) -> str:
    """The data-v attribute a table cell sorts by: the raw number, or '' when unknown."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return ""
    return repr(f) if math.isfinite(f) else ""


def _autoescape(name: str | None) -> bool:
    return not (name or "").endswith(".md.j2")


def _bytecode_cache() -> jinja2.BytecodeCache | None:
    """Compiled templates kept in the user's temp dir (keyed by the template source's
    checksum, so an edited template recompiles): compiling them took ~0.3 s of every run."""
    try:
        return jinja2.FileSystemBytecodeCache()
    except (OSError, RuntimeError):  # no private temp dir to be had: compile each time
        return None


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("reports", "templates"),
        bytecode_cache=_bytecode_cache(),
        autoescape=_autoescape,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(
        us=fmt_us, ratio=fmt_ratio, pct=fmt_pct, sci=fmt_sci, days=lambda e: fmt_days(*e),
        mdtext=md_text, code=md_code, v=_sort_key, brk=html_breakable, shapes=html_shapes, unprefixed=unprefixed, gap=signed_us, plain=plain_name,
        plainfix=plain_fix,
    )
    return env


def by_gap(rows: list, n: int | None = None) -> list:
    """Rows with the largest gaps first, losses and wins alike."""
    return sorted(rows, key=lambda r: abs(r.gap_us), reverse=True)[:n]


def _context(m: ReportModel) -> dict[str, Any]:
    folded = bool(m.by_module_kind) and len(m.by_module_kind) < len(m.by_module)
    losses, wins = losses_and_wins(m)
    return {
        "m": m,
        "where_what": where_label(m),
        "losses": losses,
        "wins": wins,
        "not_measured": not_measured(m),
        "titles": side_titles(m),
        "points": summary_points(m),
        "parity": parity_text(m),
        "charts": {k: Markup(v) for k, v in build_charts(m).items()},
        "top_gaps": by_gap(m.top_gaps, TOP_GAPS),
        "by_class": by_gap(m.by_class),
        "has_gross": any(r.gross_loss_us is not None for r in m.by_class),
        "modules": by_gap(m.by_module, TOP_MODULE_ROWS),
        "module_kinds": by_gap(m.by_module_kind, TOP_MODULE_ROWS) if folded else [],
        "op_shapes": m.by_op_shape,
        "op_shape_limit": OP_SHAPES_HTML,
        "md_op_shapes": m.by_op_shape[:OP_SHAPES_MD],
        "op_calls": m.op_calls,
        "confirmed": m.confirmed,
        "md_op_calls": m.op_calls[:OP_SHAPES_MD],
        "fix_total_note": fix_total_note(m),
        "counted": m.counted_fixes(),
        "plan_ranks": plan_ranks(m),
        "provisional": provisional_prefix(m),
        "overhead": overhead_text(m.profiler_overhead),
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
            out["summary.html"] = render(m, "summary.html.j2")
        elif fmt == "md":
            out["report.md"] = render(m, "report.md.j2")
            out["summary.md"] = render(m, "summary.md.j2")
        elif fmt == "json":
            out["report.json"] = render_json(m)
        else:
            check_formats([fmt])
    return out


def check_formats(formats: Iterable[str]) -> None:
    """Each asked format is one porter renders (checked before any diagnosis is read)."""
    for fmt in formats:
        if fmt not in FORMATS:
            raise PorterError(f"unknown report format {fmt!r}",
                              hint=hint_with(fmt, (*FORMATS, "all"), f"use one of {', '.join(FORMATS)} or all"))
