"""Reports: escaping of real kernel names, atomic writes, and numbers that agree with diagnosis.json."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from _diagnoses import live_transformer_diagnosis, qwen_trace_diagnosis, real_kernel_names
from conftest import run_porter

from porter.core.errors import PorterError
from porter.core.units import fmt_ratio, fmt_us
from reports.build import model_from_diagnosis, write_reports
from reports.render import md_code, render, render_all

INJECTED = '<script>throw new Error("injected")</script>'


class Page(HTMLParser):
    """Collects element text by id, every <script> body, all text, and table cells as (text, data-v)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.by_id: dict[str, str] = {}
        self.scripts: list[str] = []
        self.text: list[str] = []
        self.tables: dict[str, list[list[list[str | None]]]] = {}
        self._open: list[tuple[str, str | None]] = []
        self._table: str | None = None
        self._cell: list[str | None] | None = None

    def handle_starttag(self, tag, attrs):
        if tag in ("meta", "input", "br", "img", "link", "line", "circle", "polyline"):
            return
        a = dict(attrs)
        self._open.append((tag, a.get("id")))
        if tag == "script":
            self.scripts.append("")
        elif tag == "table":
            self._table = a.get("id")
            self.tables.setdefault(self._table or "", [])
        elif tag == "tr" and self._table is not None:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table is not None and self.tables[self._table]:
            self._cell = ["", a.get("data-v")]
            self.tables[self._table][-1].append(self._cell)

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self._cell = None
        elif tag == "table":
            self._table = None
        while self._open:
            t, ident = self._open.pop()
            if t == tag:
                break

    def handle_data(self, data):
        if self._open and self._open[-1][0] == "script":
            self.scripts[-1] += data
            return
        self.text.append(data)
        if self._cell is not None:
            self._cell[0] += data
        for _, ident in self._open:
            if ident:
                self.by_id[ident] = self.by_id.get(ident, "") + data


def parse_html(text: str) -> Page:
    page = Page()
    page.feed(text)
    return page


def hostile_diagnosis(names: list[str]) -> dict:
    """A diagnosis.json (diagnose's field names) whose name fields hold real kernel names and an injection."""
    evil = names[0] + " " + INJECTED
    side = lambda label, dev, total: {"label": label, "device": {"name": dev, "type": "cuda"}, "profiler": "kineto", "total_us": total}  # noqa: E731
    return {
        "inputs": {"source": side("h100_escape", "NVIDIA H100 80GB HBM3", 1000.0), "target": side("mi300x_escape", "AMD <MI300X> & co", 1500.0)},
        "end_to_end": {"ratio": 1.5, "source_total_us": 1000.0, "target_total_us": 1500.0},
        "alignment": {"coverage": {"source": 0.9, "target": 0.8}},
        "by_class": [{"key": "matmul", "source_us": 600.0, "target_us": 900.0}],
        "by_module": [{"key": "model/<layers>&0", "source_us": 100.0, "target_us": 200.0}],
        "groups": [{"group_id": i, "framework_op": n, "module": "m&<x>", "op_class": "elementwise", "source_us": 10.0, "target_us": 20.0 + i}
                   for i, n in enumerate(names)] + [{"group_id": 99, "framework_op": evil, "source_us": 1.0, "target_us": 5.0}],
        "unmatched": {"target": [{"framework_op": evil, "time_us": 7.0, "module": names[1], "count": 1, "share": 0.01}]},
        "fixes": [{"title": "Fuse <elementwise> & copy", "where": evil, "why": "a|b", "first_step": "x", "effort_days": [1, 2], "recoverable_us": 100.0}],
    }


def test_html_autoescape_keeps_real_kernel_names_as_text():
    names = real_kernel_names()
    html = render(model_from_diagnosis(hostile_diagnosis(names)), "report.html.j2")
    page = parse_html(html)
    assert "injected" not in "".join(page.scripts)  # the payload never became a script element
    text = "".join(page.text)
    for name in names:  # the name survives as text, character for character
        assert name in text
    assert names[0] + " " + INJECTED in text
    assert "&lt;script&gt;" in html and "AMD &lt;MI300X&gt; &amp; co" in html


def test_markdown_keeps_names_in_code_spans_and_cells_intact():
    names = real_kernel_names()
    texts = render_all(model_from_diagnosis(hostile_diagnosis(names)), ["md"])
    md = texts["report.md"]
    for name in names:
        assert md_code(name) in md
    cells = lambda row: len(re.split(r"(?<!\\)\|", row))  # noqa: E731
    header = next(line for line in md.splitlines() if line.startswith("| Group |"))
    gap_rows = [line for line in md.splitlines() if line.startswith("| `void")]
    assert gap_rows and all(cells(row) == cells(header) for row in gap_rows)  # no stray pipes split a cell
    assert not re.search(r"(?<!\\)<script", md.replace(md_code(names[0] + " " + INJECTED), ""))  # escaped, not raw
    assert "void" not in texts["summary.md"]  # no kernel names for leadership


def test_leadership_html_twin_names_no_kernel_and_escapes_devices():
    names = real_kernel_names()
    html = render_all(model_from_diagnosis(hostile_diagnosis(names)), ["html"])["summary.html"]
    assert "void" not in html and "<script" not in html
    assert "AMD &lt;MI300X&gt; &amp; co" in html


def test_writes_are_atomic_and_leave_no_temporaries(tmp_path):
    names = real_kernel_names()
    (tmp_path / "diagnosis.json").write_text(json.dumps(hostile_diagnosis(names)))
    written = write_reports(tmp_path, ["html", "md", "json"])
    assert sorted(p.name for p in written) == ["report.html", "report.json", "report.md", "summary.html", "summary.md"]
    before = (tmp_path / "report.html").read_bytes()
    with pytest.raises(PorterError):
        write_reports(tmp_path, ["html", "pdf"])  # fails while rendering: nothing is replaced
    assert (tmp_path / "report.html").read_bytes() == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    json.loads((tmp_path / "report.json").read_text())


def test_cli_report_errors_are_one_line(tmp_path):
    proc = run_porter("report", str(tmp_path))
    assert proc.returncode == 2 and "no diagnosis.json" in proc.stderr and "Traceback" not in proc.stderr
    (tmp_path / "diagnosis.json").write_text("{not json")
    proc = run_porter("report", str(tmp_path))
    assert proc.returncode == 2 and "unreadable diagnosis.json" in proc.stderr


# ----------------------------------------------------------- a real trace-mode diagnosis

@pytest.fixture(scope="module")
def qwen(tmp_path_factory) -> Path:
    return qwen_trace_diagnosis(tmp_path_factory)


@pytest.mark.corpus
def test_diagnose_writes_reports_by_default(qwen):
    for name in ("report.html", "report.md", "summary.md", "summary.html"):
        assert (qwen / name).stat().st_size > 0, name


@pytest.mark.corpus
def test_cli_report_renders_each_format(qwen, tmp_path):
    proc = run_porter("report", str(qwen), "--format", "all", "-o", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert {p.name for p in tmp_path.iterdir()} == {"report.html", "summary.html", "report.md", "summary.md", "report.json"}
    one = tmp_path / "one.html"
    assert run_porter("report", str(qwen), "--format", "html", "-o", str(one)).returncode == 0
    assert one.read_text().startswith("<!DOCTYPE html>")


def test_templates_ship_as_package_data():
    """A regular (non-editable) install must carry the templates: pyproject's package-data covers them."""
    import fnmatch
    import tomllib

    repo = Path(__file__).resolve().parents[2]
    patterns = tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["reports"]
    files = [p.relative_to(repo / "reports").as_posix() for p in (repo / "reports" / "templates").iterdir()]
    assert files and all(any(fnmatch.fnmatch(f, pat) for pat in patterns) for f in files)


@pytest.mark.corpus
def test_report_numbers_agree_with_diagnosis_json(qwen):
    """The figures and tables of report.html and report.md carry diagnosis.json's numbers."""
    d = json.loads((qwen / "diagnosis.json").read_text())
    e2e, cov = d["end_to_end"], d["alignment"]["coverage"]
    page = parse_html((qwen / "report.html").read_text())
    assert page.by_id["fig-ratio"].strip() == fmt_ratio(d["headline"]["ratio"]) == fmt_ratio(e2e["ratio"])
    assert "fig-profiled-ratio" not in page.by_id  # a recorded pair's profiled steps are the headline
    assert page.by_id["fig-target-us"].strip() == fmt_us(e2e["target_total_us"])
    assert page.by_id["fig-source-us"].strip() == fmt_us(e2e["source_total_us"])
    assert page.by_id["fig-coverage"].strip() == f"{cov['target'] * 100:.1f}%"
    # the op-class table holds the exact floats of diagnosis.json in its sort keys
    rows = {r[0][0]: (float(r[1][1]), float(r[2][1])) for r in page.tables["t-class"][1:]}
    assert rows == {c["key"]: (c["source_us"], c["target_us"]) for c in d["by_class"]}
    # every matched-group row in the top-gaps table is one of diagnose's groups, biggest gaps (either sign) first
    head = [c[0] for c in page.tables["t-gaps"][0]]
    gaps = [float(r[head.index("Gap")][1]) for r in page.tables["t-gaps"][1:]]
    assert gaps == sorted((g["delta_us"] for g in d["groups"]), key=abs, reverse=True)[: len(gaps)]
    md = (qwen / "report.md").read_text()
    for c in d["by_class"]:
        assert f"| {c['key']} | {fmt_us(c['source_us'])} | {fmt_us(c['target_us'])} |" in md
    assert fmt_ratio(e2e["ratio"]) in md


@pytest.mark.corpus
def test_summary_is_plain_words(qwen, corpus):
    """summary.md names no kernel or framework op, and says how the target compares."""
    summary = (qwen / "summary.md").read_text()
    names = set(real_kernel_names(0)) | {g["framework_op"] for g in json.loads((qwen / "diagnosis.json").read_text())["groups"]}
    assert not [n for n in names if n and n in summary]
    assert "::" not in summary and "Not measured" in summary  # trace mode: no accuracy data
    assert f"takes {fmt_ratio(d_ratio(qwen))} the time" in summary and "times as" not in summary  # one ratio, never its inverse
    assert "Largest losses" in summary and "Largest wins" in summary


def d_ratio(diag: Path) -> float:
    return json.loads((diag / "diagnosis.json").read_text())["end_to_end"]["ratio"]


def ranked_fix_records(diag: Path) -> list[dict]:
    """porter.analysis.fixes.rank_fixes on the real matched groups (kernel counts from the two bundles)."""
    import numpy as np
    import pandas as pd

    from porter.bundles.bundle import load_bundle
    from porter.analysis.fixrank import fixes_frame, rank_fixes

    d = json.loads((diag / "diagnosis.json").read_text())
    g = pd.DataFrame(d["groups"])
    for side in ("source", "target"):
        ops = load_bundle(diag / side).ops.set_index("op_id")
        g[f"{side}_kernels"] = [int(ops.loc[ids, "kernel_count"].sum()) for ids in g[f"{side}_op_ids"]]
    g["group_id"] = g["group_id"].astype(str)
    g["target_device_type"] = d["inputs"]["target"]["device"]["type"]
    g = g.assign(flops=np.nan, bytes=np.nan, dtype="", input_shapes="", host_us=0.0)
    records = json.loads(fixes_frame(rank_fixes(g)).to_json(orient="records"))
    assert records, "no fix applies to the Qwen H100 -> MI300X groups"
    return records


@pytest.mark.corpus
def test_fix_plan_shows_ranked_fixes_and_counts_each_group_once(qwen, tmp_path):
    from porter.analysis.plan import plan_fixes
    from reports.findings import fix_where

    fixes, plan = plan_fixes(ranked_fix_records(qwen))
    d = json.loads((qwen / "diagnosis.json").read_text())
    d["fixes"], d["plan"] = fixes, plan.to_dict()
    (tmp_path / "diagnosis.json").write_text(json.dumps(d))
    write_reports(tmp_path, ["html", "md"])
    page = parse_html((tmp_path / "report.html").read_text())
    table = page.tables["t-fixes"]
    head = [c[0] for c in table[0]]
    body = [r for r in table[1:] if r[0][0] != ""]  # the tfoot row has an empty first cell
    fix_col = head.index("Fix and where")  # the catalogue's title, its marker, then where it applies
    assert all(r[fix_col][0].startswith(f["catalogue_title"]) and fix_where(f)[:20] in r[fix_col][0]
               for r, f in zip(body, fixes, strict=True))
    perf = [f for f in fixes if f["kind"] == "perf"]
    assert [float(r[head.index("Closes gap")][1]) for r in body[: len(perf)]] == [f["closes_gap_us"] for f in perf]
    seen, total, ranks = set(), 0.0, []  # fixes are alternatives per group: the best-ranked one that closes a gap counts
    for f in perf:
        if not seen.intersection(f["group_ids"]) and f["closes_gap_us"] > 0:
            total += f["closes_gap_us"]
            ranks.append(f["rank"])
            seen.update(f["group_ids"])
    assert list(plan.fixes) == ranks and plan.total_us == pytest.approx(total)
    assert page.by_id["fix-total"].strip() == fmt_us(total)  # no cap: the plan's sum, as listed
    summary = (tmp_path / "summary.md").read_text()
    first = next(f for f in perf if f["rank"] == ranks[0])
    assert f"#{ranks[0]} {first['catalogue_title']}" in summary and "::" not in summary
    assert f"about {fmt_us(total)} for" in summary


@pytest.mark.slow
def test_live_report_shows_accuracy_along_the_model(tmp_path_factory):
    diag = live_transformer_diagnosis(tmp_path_factory)
    d = json.loads((diag / "diagnosis.json").read_text())
    if d["accuracy"] is None:
        pytest.skip("diagnose does not write the accuracy block yet (porter.analysis.accuracy is not wired into diagnose)")
    page = parse_html((diag / "report.html").read_text())
    assert "no-accuracy" not in page.by_id
    rows = page.tables["t-acc"][1:]
    assert len(rows) >= 2
    # the figure is the headline (unprofiled, timed alternately), the profiled steps' ratio beside it
    h = d["headline"]
    assert page.by_id["fig-ratio"].strip() == fmt_ratio(h["ratio"])
    assert h["basis"] in page.by_id["fig-ratio-basis"]
    profiled = page.by_id["fig-profiled-ratio"]
    assert fmt_ratio(d["end_to_end"]["ratio"]) in profiled
    assert f"source {fmt_ratio(h['sides']['source']['profiler_overhead'])}" in profiled
    md = (diag / "report.md").read_text()
    lo, hi = h["ci95"]
    assert f"**End-to-end time, target / source:** {fmt_ratio(h['ratio'])} (95% interval {fmt_ratio(lo)}–{fmt_ratio(hi)})" in md
    assert ("- **Uncertain:** " in md) == bool(h["advice"])
    from reports.build import model_from_diagnosis

    m = model_from_diagnosis(d)  # after every ranked fix: the headline times the target's profiled share left
    assert m.projected_ratio == pytest.approx(h["ratio"] * (m.target.total_us - m.recoverable_us) / m.target.total_us)
    assert "No accuracy data" not in md and "| # | Module | Local | Propagated |" in md


def test_accuracy_section_carries_compare_modules_rows(tmp_path):
    """The contract with porter.analysis.accuracy: its per-module records render row for row, in model order."""
    import torch

    from porter.analysis.accuracy import compare_modules

    names = real_kernel_names()  # a module name holding < > & must stay text
    gen = torch.Generator().manual_seed(0)
    src = {f"layers.{i}": torch.randn(256, generator=gen) for i in range(5)} | {names[0]: torch.randn(8, generator=gen)}
    noise = lambda scale: scale * torch.randn(256, generator=gen)  # noqa: E731
    tgt = {k: v + (noise(1e-3 * (i + 1)) if v.numel() == 256 else 0) for i, (k, v) in enumerate(src.items())}
    local = {k: v + (noise(1e-2 if i == 2 else 1e-7) if v.numel() == 256 else 0) for i, (k, v) in enumerate(src.items())}
    df = compare_modules(src, tgt, local, dtype="fp32")
    assert bool(df["introduces_error"].iloc[2])  # the planted local loss is found by porter.analysis.accuracy
    records = json.loads(df.to_json(orient="records", double_precision=15))
    diag = hostile_diagnosis(names) | {"accuracy": {"dtype": "fp32", "modules": records}}
    (tmp_path / "diagnosis.json").write_text(json.dumps(diag))
    write_reports(tmp_path, ["html", "md"])
    html = (tmp_path / "report.html").read_text()
    page = parse_html(html)
    head = [c[0] for c in page.tables["t-acc"][0]]
    rows = page.tables["t-acc"][1:]
    assert [r[head.index("Module")][0] for r in rows] == df["module"].tolist()
    for r, want in zip(rows, records):
        assert float(r[head.index("Local")][1]) == want["local_rel_l2"]
        assert float(r[head.index("Propagated")][1]) == want["propagated_rel_l2"]
        assert (r[head.index("Introduces error")][0] == "yes") == bool(want["introduces_error"])
    assert "chart-line" in html and "no-accuracy" not in page.by_id
    assert "1 of 6 model parts introduce error" in (tmp_path / "summary.md").read_text()
