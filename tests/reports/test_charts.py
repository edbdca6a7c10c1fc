"""Inline SVG charts: well-formed, proportional, escaped, and honest about missing values."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from reports import charts

SVG = "{http://www.w3.org/2000/svg}"
values = st.lists(st.floats(min_value=0.01, max_value=1e7, allow_nan=False), min_size=1, max_size=30)


def parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)  # raises on malformed XML, e.g. an unescaped '<' or '&'
    assert root.tag == f"{SVG}svg"
    assert float(root.get("width")) > 0 and float(root.get("height")) > 0
    return root


def bar_widths(root: ET.Element) -> list[float]:
    return [float(r.get("width")) for r in root.iter(f"{SVG}rect") if r.find(f"{SVG}title") is not None]


@settings(max_examples=50, deadline=None)
@given(values)
def test_hbar_widths_are_proportional_to_values(vals):
    root = parse(charts.hbar([(f"op{i}", v) for i, v in enumerate(vals)], title="t"))
    widths = bar_widths(root)
    assert len(widths) == len(vals)
    top = max(vals)
    full = charts.WIDTH - charts.LABEL_W - charts.VALUE_W
    for w, v in zip(widths, vals):
        assert math.isclose(w, max(full * v / top, 0.5), abs_tol=0.06)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1e6), st.floats(0, 1e6)), min_size=1, max_size=20))
def test_grouped_bars_draw_one_bar_per_value(pairs):
    root = parse(charts.grouped_hbar([f"c{i}" for i in range(len(pairs))], [("src", [a for a, _ in pairs]), ("tgt", [b for _, b in pairs])], title="t"))
    assert len(bar_widths(root)) == 2 * len(pairs)


@settings(max_examples=50, deadline=None)
@given(st.floats(1, 1e6), st.lists(st.floats(-1e5, 1e5).filter(lambda d: abs(d) > 1e-3), max_size=10))
def test_waterfall_steps_chain_from_start_to_end(start, deltas):
    assume(all(start + sum(deltas[: i + 1]) >= 0 for i in range(len(deltas))))  # times: totals never go below 0
    end = start + sum(deltas)
    root = parse(charts.waterfall(("source", start), [(f"s{i}", d) for i, d in enumerate(deltas)], ("target", end), title="w"))
    rects = [r for r in root.iter(f"{SVG}rect") if r.find(f"{SVG}title") is not None]
    assert len(rects) == len(deltas) + 2
    edges = [(float(r.get("x")), float(r.get("x")) + float(r.get("width"))) for r in rects]
    pos = edges[0][1]  # where the source total ends
    tol = 0.6 + 1e-6  # half-pixel minimum bar width plus rounding to 0.1 px (and float error on top)
    for (x0, x1), d in zip(edges[1:-1], deltas):
        assert math.isclose(x0 if d > 0 else x1, pos, abs_tol=tol)  # each step starts where the last ended
        pos = x1 if d > 0 else x0
    assert math.isclose(edges[-1][1], pos, abs_tol=tol)  # ... and the chain lands on the target total
    assert all(x0 >= charts.LABEL_W - 0.01 for x0, _ in edges)  # nothing is drawn over the labels


def test_line_chart_log_scale_puts_decades_equally_apart_and_breaks_on_missing():
    svg = charts.line_chart(["a", "b", "c", "d"], [("local", [1e-6, 1e-4, None, 1e-2])], title="err")
    root = parse(svg)
    ys = [float(c.get("cy")) for c in root.iter(f"{SVG}circle")]
    assert len(ys) == 3  # the missing value is not drawn as a point
    assert math.isclose(ys[0] - ys[1], ys[1] - ys[2], rel_tol=1e-3)  # 1e-6 -> 1e-4 -> 1e-2: two decades each
    assert len(list(root.iter(f"{SVG}polyline"))) == 1  # only a-b is joined; c is missing, d stands alone


def test_names_with_markup_characters_are_escaped():
    name = "void gemm<float, 4> & <script>alert(1)</script>"
    for svg in (
        charts.hbar([(name, 1.0)], title=name),
        charts.grouped_hbar([name], [("a&b", [1.0]), ("<t>", [2.0])], title="t"),
        charts.waterfall((name, 1.0), [(name, 1.0)], (name, 2.0), title="w"),
        charts.line_chart([name], [(name, [1e-3])], title=name),
    ):
        root = parse(svg)
        assert "<script" not in svg
        texts = "".join(root.itertext())
        assert "gemm<float, 4> &" in texts or re.search(r"gemm<float, 4> &", texts)


def test_empty_input_draws_a_no_data_chart():
    for svg in (charts.hbar([], title="t"), charts.line_chart([], [], title="t"), charts.grouped_hbar([], [], title="t")):
        assert "no data" in "".join(parse(svg).itertext())
