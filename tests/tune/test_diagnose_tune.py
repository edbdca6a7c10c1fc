"""`porter diagnose --tune` end to end on CPU: the built-in transformer to inductor, the
diagnosis's fix plan tried on the target, its measurements in diagnosis.json and the reports."""

from __future__ import annotations

import json

import pytest
from conftest import run_porter


def test_tune_refuses_a_recorded_side_in_one_line(tmp_path):
    trace = tmp_path / "side.json"
    trace.write_text('{"traceEvents": []}')
    proc = run_porter("diagnose", "transformer", "--from", str(trace), "--to", "cpu:inductor", "--tune", "-o", str(tmp_path / "o"))
    assert proc.returncode == 2, proc.stderr
    assert "--tune runs the pair here, but the source is a recorded run" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) <= 2
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_diagnose_tune_carries_measured_recoveries_into_the_plan(tmp_path):
    out = tmp_path / "d"
    proc = run_porter("diagnose", "transformer", "--from", "cpu", "--to", "cpu:inductor", "--confirm", "0",
                      "--tune", "--tune-budget", "60", "-o", str(out))
    if proc.returncode == 3:
        pytest.skip(f"target unavailable here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "tried on the target (porter tune):" in proc.stdout
    d = json.loads((out / "diagnosis.json").read_text())
    tune = json.loads((out / "tune" / "tune.json").read_text())
    tried = d["tried"]
    assert tried["folder"] == "tune" and tried["status"] == tune["status"]
    assert [r["recipe"] for r in tried["candidates"]] == [c["recipe"] for c in tune["candidates"]]
    steps = d["end_to_end"]["target_per_step_us"]["n"]
    recoverable = {}
    for fix in d["fixes"]:
        if fix.get("kind") == "perf" and isinstance(fix.get("recoverable_us"), (int, float)):
            recoverable[fix["fix_id"]] = recoverable.get(fix["fix_id"], 0.0) + fix["recoverable_us"]
    for c in tune["candidates"]:  # the plan's estimate is per profiled run; the tune's per forward
        if c["fix_id"] in recoverable:
            assert c["estimated_us"] == pytest.approx(recoverable[c["fix_id"]] / steps, rel=1e-9)
    measured = [c for c in tune["candidates"] if c["status"] == "measured"]
    assert measured, tune["findings"]
    marked = [f for f in d["fixes"] if f.get("confidence") == "measured"]
    perf_ids = {f["fix_id"] for f in d["fixes"] if f.get("kind") != "accuracy"}
    assert {f["fix_id"] for f in marked} == {c["fix_id"] for c in measured} & perf_ids
    for f in marked:
        lo, hi = f["measured"]["ci95"]
        assert lo <= f["measured"]["recovered_us"] <= hi and f["estimated_confidence"] != "measured"
    for c in measured:
        assert c["holm"]["family"] == len(measured)
        assert not c["kept"] or (c["recovered_us"]["ci95"][0] > 0 and c["holm"]["rejects_no_change"])
    md = (out / "report.md").read_text()
    section = md.split("### Tried on the target (porter tune)", 1)[1].split("\n## ", 1)[0]
    assert sum(1 for line in section.splitlines() if line.startswith("| `")) == len(tune["candidates"])
    assert "Tried on the target" in (out / "summary.md").read_text()
