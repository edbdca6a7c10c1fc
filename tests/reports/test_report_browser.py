"""Open report.html in headless Chromium: it renders offline, draws its charts, and runs without JS errors.

The page writes a self-check into #selfcheck on load (measured SVG boxes, table count, a sort
probe, and every error window.onerror saw); --dump-dom returns the DOM after load.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from _diagnoses import chromium, live_transformer_diagnosis, qwen_trace_diagnosis, real_kernel_names
from conftest import run_porter
from test_report import INJECTED, hostile_diagnosis, parse_html

from porter.core.units import fmt_ratio
from reports.build import write_reports

DOCS_SHOT = Path(__file__).resolve().parents[2] / "docs" / "report-screenshot.png"
FIRST_SCREEN = (1280, 1000)  # what a reader sees on opening the report, the README's screenshot
FIT_WIDTHS = (1280, 1400)  # a laptop and a common desktop browser window, in CSS px
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


def browse(page: Path, profile: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [chromium(), *FLAGS, f"--user-data-dir={profile}", *extra, page.resolve().as_uri()],
        capture_output=True, text=True, timeout=120,
    )


def selfcheck(page: Path, profile: Path) -> tuple[dict, str]:
    proc = browse(page, profile, "--dump-dom")
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = re.search(r'<div id="selfcheck"[^>]*>(.*?)</div>', proc.stdout, re.S)
    assert m and m.group(1), "the page's load handler did not run"
    return json.loads(m.group(1).replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"')), proc.stdout


def screenshot(page: Path, profile: Path, png: Path) -> None:
    proc = browse(page, profile, f"--screenshot={png}", f"--window-size={FIRST_SCREEN[0]},{FIRST_SCREEN[1]}", "--hide-scrollbars")
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == FIRST_SCREEN


def assert_rendered(check: dict, min_charts: int) -> None:
    assert check["errors"] == []
    assert len(check["charts"]) >= min_charts
    for c in check["charts"]:
        assert c["width"] > 100 and c["height"] > 20 and c["marks"] > 0, c


@pytest.mark.slow
def test_hostile_names_render_as_text_and_run_no_injected_script(tmp_path):
    names = real_kernel_names()
    (tmp_path / "diagnosis.json").write_text(json.dumps(hostile_diagnosis(names)))
    write_reports(tmp_path, ["html"])
    check, dom = selfcheck(tmp_path / "report.html", tmp_path / "profile")
    assert_rendered(check, 3)  # class bars, waterfall, module bars (no accuracy in trace mode)
    assert check["sort_ok"] is True
    assert "injected" not in "".join(parse_html(dom).scripts)
    assert names[0] + " " + INJECTED in "".join(parse_html(dom).text)


@pytest.mark.slow
def test_op_table_shows_50_rows_and_the_rest_on_request(tmp_path):
    rows = [{"framework_op": f"aten::op{i}", "input_shapes": f"[[{i},8]]", "dtypes": '["float"]', "op_class": "elementwise",
             "source_count": 2, "target_count": 2, "source_us": 100.0, "target_us": 100.0 + i, "module_kinds": ["m/k"]}
            for i in range(1, 61)]
    (tmp_path / "diagnosis.json").write_text(json.dumps(hostile_diagnosis(real_kernel_names()) | {"by_op_shape": rows}))
    write_reports(tmp_path, ["html"])
    check, dom = selfcheck(tmp_path / "report.html", tmp_path / "profile")
    assert check["errors"] == []
    assert check["op_shapes"] == {"rows": 60, "shown": 50, "expanded": 60, "collapsed": 50, "after_sort": 50}
    first = parse_html(dom).tables["t-shape"][1]
    assert first[0][0] == "aten::op60"  # the largest gap first


@pytest.mark.slow
@pytest.mark.corpus
def test_trace_mode_report_renders_in_a_browser(tmp_path_factory):
    diag = qwen_trace_diagnosis(tmp_path_factory)
    page = diag / "report.html"
    profile = tmp_path_factory.mktemp("profile")
    check, dom = selfcheck(page, profile)
    assert_rendered(check, 3)
    d = json.loads((diag / "diagnosis.json").read_text())
    shown = parse_html(dom).by_id  # the DOM after load, as the browser built it
    assert shown["fig-ratio"].strip() == fmt_ratio(d["headline"]["ratio"])
    assert d["inputs"]["target"]["device"]["name"] in "".join(parse_html(dom).text)
    assert "No accuracy data: trace mode" in shown["no-accuracy"]
    png = tmp_path_factory.mktemp("shot") / "report.png"
    screenshot(page, profile, png)
    if os.environ.get("PORTER_UPDATE_SCREENSHOT"):  # refresh the one in the docs on purpose only
        shutil.copyfile(png, DOCS_SHOT)


@pytest.mark.slow
def test_live_report_draws_the_accuracy_chart(tmp_path_factory):
    diag = live_transformer_diagnosis(tmp_path_factory)
    if json.loads((diag / "diagnosis.json").read_text())["accuracy"] is None:
        pytest.skip("diagnose does not write the accuracy block yet (porter.analysis.accuracy is not wired into diagnose)")
    check, _ = selfcheck(diag / "report.html", tmp_path_factory.mktemp("profile"))
    assert_rendered(check, 4)
    assert any("chart-line" in c["kind"] for c in check["charts"])


def printed_pages(page: Path, profile: Path, pdf: Path) -> int:
    """Print page to PDF (A4, as the page's @page rule asks) in headless Chromium; count its pages."""
    proc = browse(page, profile, f"--print-to-pdf={pdf}", "--no-pdf-header-footer")
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = pdf.read_bytes()
    assert data[:5] == b"%PDF-"
    return len(re.findall(rb"/Type\s*/Page(?!s)", data))


@pytest.mark.slow
@pytest.mark.corpus
def test_leadership_summary_prints_on_one_page(tmp_path_factory):
    diag = qwen_trace_diagnosis(tmp_path_factory)
    tmp = tmp_path_factory.mktemp("print")
    assert printed_pages(diag / "summary.html", tmp / "profile", tmp / "summary.pdf") == 1
    # the same words as summary.md: where we stand, losses and wins, fix plan, what was not measured
    text = " ".join(parse_html((diag / "summary.html").read_text()).text)
    for heading in ("Where we stand", "Largest losses", "Largest wins", "Fix plan", "Not measured"):
        assert heading in text
    assert printed_pages(diag / "report.html", tmp / "profile", tmp / "report.pdf") > 1  # the count is real



# Loads a page into an iframe of a given width and writes what overflows it: the page's own
# scrollWidth against its viewport, the outermost elements past the right edge, and every
# scroll container whose content is wider than the container (a table scrolling sideways).
FIT_PROBE = """<!doctype html><html><body style="margin:0"><iframe id="f" style="border:0;height:900px"></iframe>
<div id="fit"></div><script>
var q = new URLSearchParams(location.search), f = document.getElementById("f");
f.style.width = q.get("w") + "px"; f.src = q.get("page");
f.onload = function () {
  var d = f.contentDocument, vw = d.documentElement.clientWidth, past = [], sideways = [];
  var name = function (el) { return el.tagName.toLowerCase() + (el.id ? "#" + el.id : ""); };
  d.querySelectorAll("body *").forEach(function (el) {
    var up = el.parentElement;
    if (el.getBoundingClientRect().right > vw + 0.5 && !(up && up.getBoundingClientRect().right > vw + 0.5)) past.push(name(el));
    if (getComputedStyle(el).overflowX !== "visible" && el.scrollWidth > el.clientWidth + 1)
      sideways.push(name(el) + ">" + (el.firstElementChild ? name(el.firstElementChild) : ""));
  });
  document.getElementById("fit").textContent = JSON.stringify(
    {viewport: vw, scroll_width: d.documentElement.scrollWidth, past: past, sideways: sideways});
};
</script></body></html>"""


def fit(page: Path, width: int, probe_dir: Path) -> dict:
    """What of `page` overflows a `width`-px window, measured by headless Chromium."""
    probe = probe_dir / "fit.html"
    probe.write_text(FIT_PROBE)
    url = f"{probe.resolve().as_uri()}?w={width}&page={page.resolve().as_uri()}"
    proc = subprocess.run([chromium(), *FLAGS, "--allow-file-access-from-files", f"--user-data-dir={probe_dir / 'profile'}",
                           "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = re.search(r'<div id="fit">(.*?)</div>', proc.stdout, re.S)
    assert m and m.group(1), f"the fit probe did not run on {page}"
    return json.loads(m.group(1).replace("&amp;", "&").replace("&quot;", '"'))


@pytest.mark.slow
@pytest.mark.corpus
def test_the_demo_a_corpus_pair_and_the_ops_and_bench_pages_fit_1280_and_1400_px(tmp_path_factory):
    """No page scrolls sideways and no table inside one does, at either width (the op-shape table
    ran 280 px past a 1400 px window; its Module kinds column was off-screen)."""
    from tests.bench_support import HISTORY

    work = tmp_path_factory.mktemp("fit")
    ops = run_porter("ops", "transformer", "--on", "xla", "-o", str(work / "ops"))
    assert ops.returncode == 0, ops.stderr[-2000:]
    db = str(work / "bench.sqlite")  # the recorded real bench history, imported and rendered
    assert run_porter("bench", "import", *map(str, sorted(HISTORY.glob("*.parquet"))), "--db", db).returncode == 0
    rendered = run_porter("bench", "report", "--db", db, "-o", str(work / "bench"))
    assert rendered.returncode == 0, rendered.stderr[-2000:]
    pages = {
        "demo": live_transformer_diagnosis(tmp_path_factory) / "report.html",
        "corpus pair": qwen_trace_diagnosis(tmp_path_factory) / "report.html",
        "ops": work / "ops" / "ops.html",
        "bench": work / "bench" / "bench.html",
    }
    found = {(what, w): fit(page, w, work) for what, page in pages.items() for w in FIT_WIDTHS}
    for (what, w), f in found.items():
        assert f["viewport"] > w - 40, (what, w, f)  # the window is as wide as asked (less a scrollbar)
    assert {k: f for k, f in found.items() if f["scroll_width"] > f["viewport"] or f["past"] or f["sideways"]} == {}
