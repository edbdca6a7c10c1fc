"""Markdown outputs escape for Markdown, not HTML: `->` and `<=` read as typed in ops.md and
bench.md; only what Markdown would take as a tag or an entity gets a backslash."""

from __future__ import annotations

import json

from conftest import FIXTURES
from reports.ops_page import render_ops
from reports.render import md_text


def test_text_markdown_would_misread_is_escaped_and_nothing_else():
    assert md_text("decomposed(-> aten.add.Tensor)") == "decomposed(-> aten.add.Tensor)"
    assert md_text("ratio <= 1.05 & stable") == "ratio <= 1.05 & stable"
    assert md_text("<script>alert(1)</script>") == "\\<script>alert(1)\\</script>"
    assert md_text("AT&amp;T | x\ny") == "AT\\&amp;T \\| x y"


def test_ops_md_of_a_real_matrix_shows_arrows_not_entities():
    data = json.loads((FIXTURES / "ops" / "mlp_xla.json").read_text())
    cell = data["rows"][0]["cells"]["xla"]
    cell["confirmed"].update(status="decomposed", ops=["aten.permute.default", "aten.addmm.default"])
    md = render_ops(data, "md")
    assert "&gt;" not in md and "&lt;" not in md
    row = next(line for line in md.splitlines() if line.startswith("| `aten.linear.default`"))
    assert "decomposed" in row and "->" in row, row
