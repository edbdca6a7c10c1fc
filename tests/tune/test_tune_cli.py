"""`porter tune` end to end on CPU: the built-in transformer to inductor, two recipes and one
that fails, under a small budget; then the same command again, which reads the cache."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BROKEN = """
[[fix]]
id = "compiled-region-slower"
[[fix.apply.inductor-cpp]]
name = "broken-option"
changes = "an inductor option that does not exist: the recipe must fail on its own, the rest go on"
numerics = false
inductor = { porter_no_such_option = true }
"""


def tune(out: Path, catalogue: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "porter", "tune", "transformer", "--from", "cpu", "--to", "cpu:inductor",
                           "--try", "freezing", "--try", "bf16-autocast", "--try", "broken-option", "--budget", "40",
                           "--catalogue", str(catalogue), "-o", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_tune_measures_keeps_and_resumes(tmp_path):
    catalogue = tmp_path / "fixes.toml"
    catalogue.write_text(BROKEN)
    out = tmp_path / "tune"
    proc = tune(out, catalogue)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads((out / "tune.json").read_text())
    assert doc["format"] == "porter-tune/1" and doc["stack"] == "inductor-cpp"
    assert doc["policy"]["clock"] == "cpu" and doc["versions"]["torch"]
    by = {c["recipe"]: c for c in doc["candidates"]}
    assert set(by) == {"freezing", "bf16-autocast", "broken-option"}

    bf16 = by["bf16-autocast"]  # a precision port: measured and shown, but it cannot hold fp32's tolerance
    assert bf16["status"] == "measured" and bf16["accuracy"]["rel_l2"] > doc["tolerance"] == 1e-4
    assert not bf16["kept"] and "accuracy does not hold" in bf16["why"]

    fz = by["freezing"]
    lo, hi = fz["measured"]["ci95"]
    assert lo <= fz["measured"]["ratio"] <= hi and fz["rounds"] >= 20
    rlo, rhi = fz["recovered_us"]["ci95"]
    assert fz["holm"]["family"] == bf16["holm"]["family"] == 2  # both measured recipes are the family
    assert fz["holm"]["p"] == fz["recovery"]["p"]
    assert fz["kept"] == (rlo > 0 and fz["accuracy"]["within_tolerance"] and fz["holm"]["rejects_no_change"])
    assert fz["accuracy"]["rel_l2"] < 1e-4  # freezing folds weights; the numbers stay fp32's

    broken = by["broken-option"]
    assert broken["status"] == "failed" and not broken["kept"]
    assert any(f.startswith("broken-option failed on transformer:") and "\n" not in f for f in doc["findings"])

    if doc["best"]:
        assert doc["best"]["recipes"] == ["freezing"]
        assert "freezing" in (out / "tuned-settings.txt").read_text()
        from porter.bench.suite import load_suite

        case = load_suite(out / "tuned-bench.toml").cases[0]
        assert case.recipes_for("cpu:inductor") == ("freezing",)

    t0 = time.monotonic()
    again = tune(out, catalogue)  # everything is in tune-cache.json: nothing is measured twice
    assert again.returncode == 0, again.stderr[-2000:]
    doc2 = json.loads((out / "tune.json").read_text())
    assert all(c.get("from_cache") for c in doc2["candidates"])
    assert {c["recipe"]: c.get("measured") for c in doc2["candidates"]} == {c["recipe"]: c.get("measured") for c in doc["candidates"]}
    assert "measured before" in again.stderr and time.monotonic() - t0 < 60
