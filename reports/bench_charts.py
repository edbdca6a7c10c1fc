"""The benchmark trend chart: one series' per-run medians over its history, inline SVG.

Each run is a point with its median's 95% interval as a whisker; runs that regress are
red, suspects orange, unstable runs hollow; a dashed vertical rule marks each change
point (the first run after a step) with the step's size. Built on reports.charts'
primitives, so text is escaped the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from reports.charts import SOURCE_COLOR, TARGET_COLOR, WIDTH, WORSE_COLOR, _empty, _num, _open, _text

TREND_HEIGHT = 240.0


@dataclass(frozen=True)
class TrendPoint:
    label: str  # the run, e.g. "2026-12-01 12:04 ab12cd"
    median_ms: float
    low_ms: float
    high_ms: float
    mark: str = ""  # "", "regression", "suspect", "unstable"


def trend_chart(points: Sequence[TrendPoint], change_points: Sequence[tuple[int, str]], *, title: str) -> str:
    """points in history order; change_points as (index of the first run after the step, label)."""
    vals = [v for p in points for v in (p.low_ms, p.high_ms, p.median_ms) if v == v and v > 0]
    if not vals:
        return _empty(title)
    left, right, top, bottom = 70.0, 20.0, 26.0, 40.0
    width, height = float(WIDTH), TREND_HEIGHT
    plot_w, plot_h = width - left - right, height - top - bottom
    lo, hi = min(vals), max(vals)
    pad = (hi - lo) * 0.08 or hi * 0.05 or 1.0
    lo, hi = max(lo - pad, 0.0), hi + pad
    n = len(points)

    def x_of(i: float) -> float:
        return left + plot_w * (i + 0.5) / n

    def y_of(v: float) -> float:
        return top + plot_h * (1 - (v - lo) / (hi - lo))

    out = [_open(width, height, title, "trend"), _text(left, 16, title)]
    for k in range(5):
        v = lo + (hi - lo) * k / 4
        y = y_of(v)
        out.append(f'<line x1="{_num(left)}" y1="{_num(y)}" x2="{_num(width - right)}" y2="{_num(y)}" stroke="#e3e3e3"/>')
        out.append(_text(left - 6, y + 4, f"{v:.3g} ms", "end"))
    for index, label in change_points:
        x = x_of(index - 0.5)
        out.append(f'<line class="change-point" x1="{_num(x)}" y1="{_num(top)}" x2="{_num(x)}" y2="{_num(top + plot_h)}" '
                   f'stroke="{TARGET_COLOR}" stroke-dasharray="5 4"><title>{escape(label)}</title></line>')
        out.append(_text(x + 4, top + 12, label, "start", f' fill="{TARGET_COLOR}" font-size="11"'))
    line = " ".join(f"{_num(x_of(i))},{_num(y_of(p.median_ms))}" for i, p in enumerate(points))
    if n > 1:
        out.append(f'<polyline points="{line}" fill="none" stroke="{SOURCE_COLOR}" stroke-width="1.5"/>')
    for i, p in enumerate(points):
        x = x_of(i)
        color = WORSE_COLOR if p.mark == "regression" else TARGET_COLOR if p.mark == "suspect" else SOURCE_COLOR
        out.append(f'<line x1="{_num(x)}" y1="{_num(y_of(p.low_ms))}" x2="{_num(x)}" y2="{_num(y_of(p.high_ms))}" stroke="{color}"/>')
        fill = "white" if p.mark == "unstable" else color
        tip = f"{p.label}: median {p.median_ms:.4g} ms, 95% interval {p.low_ms:.4g}-{p.high_ms:.4g} ms{' (' + p.mark + ')' if p.mark else ''}"
        out.append(f'<circle class="run {escape(p.mark)}" cx="{_num(x)}" cy="{_num(y_of(p.median_ms))}" r="4" fill="{fill}" '
                   f'stroke="{color}" stroke-width="1.5"><title>{escape(tip)}</title></circle>')
    step = max(1, -(-n // 8))
    for i in range(0, n, step):
        out.append(_text(x_of(i), height - bottom + 16, points[i].label[:16], "middle", ' font-size="10"'))
    out.append("</svg>")
    return "".join(out)


__all__ = ["TrendPoint", "trend_chart"]
