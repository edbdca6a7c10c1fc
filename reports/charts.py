"""Inline SVG charts for the reports, drawn in Python so a report works offline.

Each function takes plain numbers and labels and returns one `<svg>` string; every text
that reaches the SVG goes through html.escape (kernel and op names hold `<`, `>`, `&`).
The analysis never draws (it returns data); only the report layer calls these.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from html import escape

SOURCE_COLOR = "#4c78a8"
TARGET_COLOR = "#f58518"
WORSE_COLOR = "#e45756"
BETTER_COLOR = "#54a24b"
TOTAL_COLOR = "#72777d"
SERIES_COLORS = (SOURCE_COLOR, TARGET_COLOR, "#b279a2", "#54a24b", "#9d755d")

FONT = 12
ROW = 22
LABEL_W = 260
VALUE_W = 80
WIDTH = 900
MAX_LABEL = 32  # characters: at 12 px system-ui up to ~7.4 px each, inside LABEL_W

Fmt = Callable[[float], str]


def _num(v: float) -> str:
    return f"{v:.1f}"


def _default_fmt(v: float) -> str:
    return f"{v:.3g}"


def _clip(label: str, limit: int = MAX_LABEL) -> str:
    return label if len(label) <= limit else "\u2026" + label[-(limit - 1):]


def _open(width: float, height: float, title: str, kind: str) -> str:
    return (
        f'<svg class="chart chart-{kind}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_num(width)} {_num(height)}" '
        f'width="{_num(width)}" height="{_num(height)}" role="img" aria-label="{escape(title)}" '
        f'font-family="system-ui, sans-serif" font-size="{FONT}"><title>{escape(title)}</title>'
    )


def _text(x: float, y: float, s: str, anchor: str = "start", extra: str = "") -> str:
    return f'<text x="{_num(x)}" y="{_num(y)}" text-anchor="{anchor}"{extra}>{escape(s)}</text>'


def _label(y: float, full: str) -> str:
    """A left-column row label, clipped, with the full text as a tooltip."""
    return (
        f'<text x="{_num(LABEL_W - 6)}" y="{_num(y)}" text-anchor="end"><title>{escape(full)}</title>'
        f"{escape(_clip(full))}</text>"
    )


def _rect(x: float, y: float, w: float, h: float, color: str, tip: str) -> str:
    return (
        f'<rect x="{_num(x)}" y="{_num(y)}" width="{_num(max(w, 0.5))}" height="{_num(h)}" fill="{color}">'
        f"<title>{escape(tip)}</title></rect>"
    )


def _legend(x: float, y: float, items: Sequence[tuple[str, str]]) -> str:
    parts = []
    for name, color in items:
        parts.append(f'<rect x="{_num(x)}" y="{_num(y - 10)}" width="12" height="12" fill="{color}"/>')
        parts.append(_text(x + 16, y, name))
        x += 24 + 7 * len(name)
    return "".join(parts)


def _empty(title: str) -> str:
    return _open(WIDTH, 40, title, "empty") + _text(WIDTH / 2, 24, "no data", "middle") + "</svg>"


def hbar(rows: Sequence[tuple[str, float]], *, title: str, fmt: Fmt = _default_fmt, color: str = TARGET_COLOR) -> str:
    """Horizontal bars, one per (label, value), longest first as given; values >= 0."""
    if not rows:
        return _empty(title)
    top = max(max(v for _, v in rows), 1e-12)
    plot_w = WIDTH - LABEL_W - VALUE_W
    height = ROW * len(rows) + 10
    out = [_open(WIDTH, height, title, "hbar")]
    for i, (label, value) in enumerate(rows):
        y = 5 + i * ROW
        w = plot_w * max(value, 0.0) / top
        out.append(_label(y + 15, label))
        out.append(_rect(LABEL_W, y + 3, w, ROW - 6, color, f"{label}: {fmt(value)}"))
        out.append(_text(LABEL_W + w + 4, y + 15, fmt(value)))
    out.append("</svg>")
    return "".join(out)


def grouped_hbar(
    labels: Sequence[str],
    series: Sequence[tuple[str, Sequence[float]]],
    *,
    title: str,
    fmt: Fmt = _default_fmt,
) -> str:
    """Horizontal bars grouped per label, one bar per series (e.g. source vs target time)."""
    if not labels or not series:
        return _empty(title)
    top = max(max((max(vals) if len(vals) else 0.0) for _, vals in series), 1e-12)
    plot_w = WIDTH - LABEL_W - VALUE_W
    bar_h = 9
    group_h = bar_h * len(series) + 10
    height = 28 + group_h * len(labels)
    out = [_open(WIDTH, height, title, "grouped")]
    out.append(_legend(LABEL_W, 16, [(name, SERIES_COLORS[i % len(SERIES_COLORS)]) for i, (name, _) in enumerate(series)]))
    for i, label in enumerate(labels):
        y0 = 26 + i * group_h
        out.append(_label(y0 + group_h / 2 + 3, label))
        for j, (name, vals) in enumerate(series):
            v = float(vals[i])
            w = plot_w * max(v, 0.0) / top
            y = y0 + 3 + j * bar_h
            out.append(_rect(LABEL_W, y, w, bar_h - 1, SERIES_COLORS[j % len(SERIES_COLORS)], f"{label} ({name}): {fmt(v)}"))
            out.append(_text(LABEL_W + w + 4, y + bar_h - 1, fmt(v), extra=' font-size="10"'))
    out.append("</svg>")
    return "".join(out)


def waterfall(
    start: tuple[str, float],
    steps: Sequence[tuple[str, float]],
    end: tuple[str, float],
    *,
    title: str,
    fmt: Fmt = _default_fmt,
) -> str:
    """Horizontal waterfall: a start total, signed steps that move it, and the end total.

    Steps that add time (target slower) are red, steps that remove it green. When the
    steps are small against the totals, the axis starts above zero (and says so) so that
    they stay visible.
    """
    running = [start[1]]
    for _, d in steps:
        running.append(running[-1] + d)
    hi = max(*running, end[1], 1e-12)
    low = min(*running, end[1])
    lo = min(0.0, low)
    if low > 0 and 0 < (hi - low) < 0.25 * hi:
        lo = max(0.0, low - 1.5 * (hi - low))
    plot_w = WIDTH - LABEL_W - VALUE_W

    def x_of(v: float) -> float:
        return LABEL_W + plot_w * (v - lo) / (hi - lo)

    rows = len(steps) + 2
    height = ROW * rows + 10 + (16 if lo > 0 else 0)
    out = [_open(WIDTH, height, title, "waterfall")]
    y = 5.0
    if lo > 0:
        out.append(_text(LABEL_W, 14, f"axis starts at {fmt(lo)}", extra=' font-size="10" fill="#72777d"'))
        y += 16
    out.append(_label(y + 15, start[0]))
    base = x_of(max(lo, 0.0))
    out.append(_rect(base, y + 3, x_of(start[1]) - base, ROW - 6, SOURCE_COLOR, f"{start[0]}: {fmt(start[1])}"))
    out.append(_text(x_of(start[1]) + 4, y + 15, fmt(start[1])))
    top = y
    for i, (label, d) in enumerate(steps):
        y = top + (i + 1) * ROW
        a, b = running[i], running[i + 1]
        x0, x1 = sorted((x_of(a), x_of(b)))
        color = WORSE_COLOR if d > 0 else BETTER_COLOR
        sign = "+" if d > 0 else "\u2212"
        out.append(_label(y + 15, label))
        out.append(_rect(x0, y + 3, x1 - x0, ROW - 6, color, f"{label}: {sign}{fmt(abs(d))}"))
        out.append(
            f'<line x1="{_num(x_of(a))}" y1="{_num(y - 3)}" x2="{_num(x_of(a))}" y2="{_num(y + 3)}" stroke="#999"/>'
        )
        out.append(_text(x1 + 4, y + 15, f"{sign}{fmt(abs(d))}"))
    y = top + (rows - 1) * ROW
    out.append(_label(y + 15, end[0]))
    out.append(_rect(base, y + 3, x_of(end[1]) - base, ROW - 6, TARGET_COLOR, f"{end[0]}: {fmt(end[1])}"))
    out.append(_text(x_of(end[1]) + 4, y + 15, fmt(end[1])))
    out.append("</svg>")
    return "".join(out)


def _log_ticks(lo: float, hi: float) -> list[float]:
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    if a == b:
        b += 1
    return [10.0**k for k in range(a, b + 1)]


def line_chart(
    x_labels: Sequence[str],
    series: Sequence[tuple[str, Sequence[float | None]]],
    *,
    title: str,
    log_y: bool = True,
    y_label: str = "",
    threshold: tuple[str, float] | None = None,
) -> str:
    """Lines over an ordered x axis (e.g. module depth); log-scale y by default.

    Missing values (None, NaN, or <= 0 on a log axis) break the line instead of faking a point.
    A threshold draws a dashed horizontal rule (e.g. the tolerance).
    """
    vals = [v for _, ys in series for v in ys if v is not None and v == v and (v > 0 or not log_y)]
    if threshold is not None:
        vals.append(threshold[1])
    if not x_labels or not vals:
        return _empty(title)
    left, right, top_pad, bottom = 70.0, 20.0, 34.0, 110.0
    width, height = float(WIDTH), 380.0
    plot_w, plot_h = width - left - right, height - top_pad - bottom
    if log_y:
        ticks = _log_ticks(min(vals), max(vals))
        lo, hi = math.log10(ticks[0]), math.log10(ticks[-1])
        fwd = math.log10
    else:
        lo, hi = min(0.0, min(vals)), max(vals) or 1.0
        ticks = [lo + (hi - lo) * k / 4 for k in range(5)]
        fwd = float

    def y_of(v: float) -> float:
        return top_pad + plot_h * (1 - (fwd(v) - lo) / ((hi - lo) or 1.0))

    n = len(x_labels)

    def x_of(i: int) -> float:
        return left + (plot_w * (i + 0.5) / n)

    out = [_open(width, height, title, "line")]
    out.append(_legend(left, 18, [(name, SERIES_COLORS[i % len(SERIES_COLORS)]) for i, (name, _) in enumerate(series)]))
    for t in ticks:
        y = y_of(t)
        out.append(f'<line x1="{_num(left)}" y1="{_num(y)}" x2="{_num(width - right)}" y2="{_num(y)}" stroke="#e3e3e3"/>')
        out.append(_text(left - 6, y + 4, f"{t:.0e}" if log_y else f"{t:.3g}", "end"))
    if y_label:
        out.append(_text(14, top_pad + plot_h / 2, y_label, "middle", f' transform="rotate(-90 14 {_num(top_pad + plot_h / 2)})"'))
    step = max(1, math.ceil(n / 40))
    for i, lab in enumerate(x_labels):
        if i % step:
            continue
        x, y = x_of(i), top_pad + plot_h + 8
        out.append(
            f'<text x="{_num(x)}" y="{_num(y)}" text-anchor="end" font-size="10" transform="rotate(-50 {_num(x)} {_num(y)})">'
            f"<title>{escape(lab)}</title>{escape(_clip(lab, 18))}</text>"
        )
    if threshold is not None:
        y = y_of(threshold[1])
        out.append(
            f'<line x1="{_num(left)}" y1="{_num(y)}" x2="{_num(width - right)}" y2="{_num(y)}" stroke="{WORSE_COLOR}" stroke-dasharray="5 4"/>'
        )
        out.append(_text(width - right, y - 4, threshold[0], "end", f' fill="{WORSE_COLOR}"'))
    for j, (name, ys) in enumerate(series):
        color = SERIES_COLORS[j % len(SERIES_COLORS)]
        segs: list[list[tuple[float, float]]] = [[]]
        for i, v in enumerate(ys):
            if v is None or v != v or (log_y and v <= 0):
                segs.append([])
                continue
            segs[-1].append((x_of(i), y_of(v)))
            out.append(
                f'<circle cx="{_num(x_of(i))}" cy="{_num(y_of(v))}" r="2.5" fill="{color}">'
                f"<title>{escape(x_labels[i])} ({escape(name)}): {v:.3g}</title></circle>"
            )
        for seg in segs:
            if len(seg) > 1:
                pts = " ".join(f"{_num(x)},{_num(y)}" for x, y in seg)
                out.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="1.8"/>')
    out.append("</svg>")
    return "".join(out)
