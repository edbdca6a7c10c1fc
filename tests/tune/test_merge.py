"""diagnose --tune's merge: a tune's measurements carried into the diagnosis it tuned, and the
reports' Tried section rendered from them (on the real Qwen corpus diagnosis, with a tune
block of the shape porter tune writes)."""

from __future__ import annotations

import json

import pytest
from _diagnoses import qwen_trace_diagnosis

from porter.core.units import fmt_ratio
from porter.tune.merge import merge_tune, tried_block
from reports.build import model_from_diagnosis
from reports.render import render


def tune_doc(fix_a: str, fix_b: str) -> dict:
    """Two recipes of one fix (one kept, one not beyond chance), one failed recipe of another."""
    return {
        "status": "complete", "budget_s": 60.0, "elapsed_s": 41.5, "tolerance": 1e-4, "search": "greedy",
        "candidates": [
            {"fix_id": fix_a, "recipe": "freezing", "status": "measured", "estimated_us": 200.0,
             "recovered_us": {"value": 97.0, "ci95": [91.0, 103.0]}, "accuracy": {"rel_l2": 3e-7, "within_tolerance": True},
             "kept": True, "why": "recovers 91-103 us, accuracy within tolerance", "holm": {"p": 0.0005}},
            {"fix_id": fix_a, "recipe": "max-autotune", "status": "measured", "estimated_us": 200.0,
             "recovered_us": {"value": 4.0, "ci95": [-2.0, 10.0]}, "accuracy": {"rel_l2": 2e-7, "within_tolerance": True},
             "kept": False, "why": "recovers -2-10 us: within noise", "holm": {"p": 0.31}},
            {"fix_id": fix_b, "recipe": "broken", "status": "failed", "estimated_us": 50.0, "kept": False,
             "why": "broken failed on transformer: no such option"},
        ],
        "best": {"recipes": ["freezing"], "measured": {"ratio": 0.725, "ci95": [0.721, 0.728]},
                 "recovered_us": {"value": 97.0, "ci95": [91.0, 103.0]}},
        "findings": ["broken failed on transformer: no such option"],
    }


def test_tried_block_calibrates_measured_against_estimated():
    block = tried_block(tune_doc("a", "b"), "tune")
    assert [r["recipe"] for r in block["candidates"]] == ["freezing", "max-autotune", "broken"]
    assert block["candidates"][2]["recovered_us"] is None  # failed: nothing measured, nothing calibrated
    assert [c["recipe"] for c in block["calibration"]] == ["freezing", "max-autotune"]
    assert block["calibration"][0]["measured_over_estimated"] == pytest.approx(97.0 / 200.0)
    assert block["best"]["recipes"] == ["freezing"] and block["candidates"][0]["holm_p"] == 0.0005


def test_merge_marks_the_fix_measured_by_its_best_kept_recipe():
    diagnosis = {"fixes": [{"fix_id": "a", "kind": "perf", "confidence": "medium", "recoverable_us": 2000.0},
                           {"fix_id": "b", "kind": "perf", "confidence": "low"},
                           {"fix_id": "a", "kind": "accuracy", "confidence": "high"}],
                 "other": 1}
    merged = merge_tune(diagnosis, tune_doc("a", "b"), "tune")
    a, b, acc = merged["fixes"]
    assert a["confidence"] == "measured" and a["estimated_confidence"] == "medium"
    assert a["measured"] == {"recipe": "freezing", "recovered_us": 97.0, "ci95": [91.0, 103.0], "kept": True}
    assert a["recoverable_us"] == 2000.0  # the plan's totals stay the estimate's
    assert "measured" not in b and b["confidence"] == "low"  # its only recipe failed
    assert "measured" not in acc  # an accuracy fix is not a time recovery
    assert merged["other"] == 1 and "measured" not in diagnosis["fixes"][0]  # the input is not changed


def test_reports_show_what_was_tried(tmp_path_factory):
    d = json.loads((qwen_trace_diagnosis(tmp_path_factory) / "diagnosis.json").read_text())
    perf = [f["fix_id"] for f in d["fixes"] if f.get("kind") == "perf"]
    assert len(set(perf)) >= 2
    merged = merge_tune(d, tune_doc(perf[0], perf[-1] if perf[-1] != perf[0] else perf[1]), "tune")
    m = model_from_diagnosis(merged)
    assert [r.recipe for r in m.tried] == ["freezing", "max-autotune", "broken"]
    assert m.tried[0].kept and m.tried[0].low_us == 91.0 and not m.tried[1].kept
    assert m.tried_best == "freezing: x0.725 [0.721, 0.728] of the source, measured"
    md = render(m, "report.md.j2")
    section = md.split("### Tried on the target (porter tune)", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    assert len(rows) == 3 and "`freezing`" in rows[0] and "| yes |" in rows[0] and "| no |" in rows[1]
    assert f"| {fmt_ratio(97.0 / 200.0)} |" in rows[0] and f"| {fmt_ratio(4.0 / 200.0)} |" in rows[1]
    assert m.tried[2].measured_over_estimated is None  # failed: no calibration
    assert "Best combination: freezing: x0.725" in section
    html = render(m, "report.html.j2")
    assert html.count('<table id="t-tried">') == 1 and "max-autotune" in html
    for name in ("summary.md.j2", "summary.html.j2"):
        assert "freezing" in render(m, name), name
    plain = model_from_diagnosis(d)
    assert not plain.tried and "Tried on the target" not in render(plain, "report.md.j2")
