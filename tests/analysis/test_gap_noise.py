"""Module and group gaps carry a 95% interval from the profiled steps (porter.analysis.gap_noise),
and only gaps whose interval excludes zero are ranked as losses, wins or fixes."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from porter.analysis.gap_noise import DEFAULT_PROFILED_STEPS, gap_intervals
from reports.fields import within_noise
from reports.terminal import losses_and_wins
from tests.conftest import run_porter


def _steps(rows: dict[str, list[float]]) -> pd.DataFrame:
    return pd.DataFrame.from_dict(rows, orient="index", columns=range(len(next(iter(rows.values())))))


def test_a_shift_beyond_the_steps_noise_is_significant_and_noise_alone_is_not():
    rng = np.random.default_rng(7)
    n = DEFAULT_PROFILED_STEPS
    src = _steps({"slow": list(100 + rng.normal(0, 3, n)), "same": list(100 + rng.normal(0, 3, n))})
    tgt = _steps({"slow": list(130 + rng.normal(0, 3, n)), "same": list(100 + rng.normal(0, 3, n))})
    g = gap_intervals(src, tgt, (1.0, 1.0))
    assert g.loc["slow", "significant"] and 20 < g.loc["slow", "gap_low_us"] < 30 < g.loc["slow", "gap_high_us"] < 40
    assert not g.loc["same", "significant"] and g.loc["same", "gap_low_us"] < 0 < g.loc["same", "gap_high_us"]
    assert (g["gap_steps"] == n).all()


def test_the_step_scale_applies_before_the_gap():
    """A target profiled 2x slower by its profiler (step_scale 0.5) and truly equal: no gap."""
    src = _steps({"m": [10.0, 11, 9, 10, 10.5, 9.5, 10, 10]})
    g = gap_intervals(src, src * 2, (1.0, 0.5))
    assert not g.loc["m", "significant"] and g.loc["m", "gap_low_us"] == pytest.approx(0.0)


def test_a_gap_made_by_one_sides_scale_is_within_the_scales_interval():
    """The same stack against itself once read a target profiled 2.05x [1.88, 2.20] slower than
    unprofiled and a source 1.50x [1.42, 1.58]: with each side's point scale, a module truly
    equal on both (100 us) read 10 us faster on the target beyond its steps' noise; within the
    scales' intervals it is noise, and a gap five times larger stays significant."""
    from porter.analysis.headline import step_scale, step_scale_bounds
    from porter.core.stats import RatioInterval

    rng = np.random.default_rng(3)
    n = DEFAULT_PROFILED_STEPS
    src_slow = RatioInterval(1.50, 1.42, 1.58, n, "")
    tgt_slow = RatioInterval(2.05, 1.88, 2.20, n, "")
    scales = (step_scale(src_slow), step_scale(tgt_slow))
    bounds = (step_scale_bounds(src_slow), step_scale_bounds(tgt_slow))
    assert bounds[1] == pytest.approx((1 / 2.20, 1 / 1.88)) and bounds[0][0] < scales[0] < bounds[0][1]
    src = _steps({"same": list(150 + rng.normal(0, 1, n)), "slow": list(150 + rng.normal(0, 1, n))})
    tgt = _steps({"same": list(185 + rng.normal(0, 1, n)), "slow": list(300 + rng.normal(0, 1, n))})
    point = gap_intervals(src, tgt, scales)
    assert point.loc["same", "significant"] and point.loc["same", "gap_high_us"] < -5  # the phantom
    g = gap_intervals(src, tgt, scales, bounds)
    assert not g.loc["same", "significant"] and g.loc["same", "gap_low_us"] < 0 < g.loc["same", "gap_high_us"]
    assert g.loc["slow", "significant"] and 25 < g.loc["slow", "gap_low_us"] < 46 < g.loc["slow", "gap_high_us"]
    assert step_scale_bounds(RatioInterval(1.02, 0.97, 1.08, n, "")) == (1.0, 1.0)  # not applied: not widened


def test_one_step_is_not_judged():
    g = gap_intervals(_steps({"m": [1.0]}), _steps({"m": [5.0]}), (1.0, 1.0))
    assert not g.loc["m", "significant"] and not within_noise(g.reset_index().iloc[0].to_dict() | {"gap_steps": 1})


def test_rows_within_noise_are_counted_apart_from_losses_and_wins():
    rows = [{"key": "a", "delta_us": 50.0, "ratio": 2.0, "gap_steps": 10, "significant": True},
            {"key": "b", "delta_us": 80.0, "ratio": 1.1, "gap_steps": 10, "significant": False},
            {"key": "c", "delta_us": -5.0, "ratio": 0.9}]  # no interval (a recorded pair): judged as before
    lines = losses_and_wins(rows, lambda r: r["key"], 100, "module", 5)
    named = [line.split()[-1] for line in lines if line.startswith("    ") and "us" in line.split()[:2]]
    assert named == ["a", "c"]
    assert "within noise: 1 more" in lines[-2] and "largest 80.0" in " ".join(lines[-2:])


@pytest.mark.slow
def test_live_pair_marks_each_module_gap_and_the_fix_plan_uses_only_gaps_beyond_noise(tmp_path):
    """The built-in demo model on eager CPU against itself: every module gap carries an interval
    over the default profiled steps, and a regression fix names no module within noise."""
    r = run_porter("diagnose", "--from", "cpu", "--to", "cpu", "--repeats", "3", "--confirm", "0", "-o", str(tmp_path))
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads((tmp_path / "diagnosis.json").read_text())
    assert "confirmed" not in d and "confirm" not in d["seconds"]  # --confirm 0: no module re-timed
    mods = d["by_module"]
    assert mods and all(m["gap_steps"] == DEFAULT_PROFILED_STEPS for m in mods)
    assert all(m["gap_low_us"] <= m["gap_high_us"] for m in mods)
    assert sum(m["significant"] for m in mods) <= len(mods) // 4  # the same stack twice: mostly noise
    noise = {m["key"] for m in mods if not m["significant"]}
    for f in d["fixes"]:
        if f["kind"] == "perf" and f["opportunity"] == "regression":
            assert not noise & set(f["modules"]), f
    # the step table's ratio is what its rows add up to, and a disagreement with the headline says why
    counted = d["headline"]["ops_step"]
    assert counted["source_ops_us"] == pytest.approx(sum(m["source_step_us"] for m in mods))
    assert counted["ratio"] == pytest.approx(counted["target_ops_us"] / counted["source_ops_us"])
    lo, hi = d["headline"]["ci95"]
    assert counted["agrees_with_headline"] == (lo <= counted["ratio"] <= hi)
    assert bool(counted["why"]) == (not counted["agrees_with_headline"])
    summary = r.stdout.replace("\n", " ")
    assert "step table (ops per step" in summary and ("differs from the headline" in summary) == bool(counted["why"])


@pytest.mark.slow
def test_confirm_retimes_the_largest_module_gaps_alone_on_both_stacks(tmp_path):
    """`--confirm 3` on the demo model to xla: three modules re-timed alone with their intervals,
    beside their profiled gaps, in diagnosis.json and the summary; `--confirm 0` runs none."""
    r = run_porter("diagnose", "--from", "cpu", "--to", "xla", "--repeats", "3", "--confirm", "3", "-o", str(tmp_path))
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads((tmp_path / "diagnosis.json").read_text())
    block = d["confirmed"]
    assert block["stacks"] == ["eager", "xla"] and block["clock"] == "cpu" and len(block["modules"]) == 3
    steps = {m["key"]: m["target_step_us"] - m["source_step_us"] for m in d["by_module"] if m["key"]}
    chosen = sorted(steps, key=lambda k: -abs(steps[k]))[:3]
    assert sorted(m["module"] for m in block["modules"]) == sorted(chosen)  # the largest gaps per step
    alone = [m["gap_us"] for m in block["modules"] if m["significant"] and not m["inside"]]
    assert alone == sorted(alone, reverse=True)  # listed by the gap alone, largest loss first
    inside = {m["module"]: sum(1 for k in steps if k.startswith(m["module"] + "/")) for m in block["modules"]}
    for m in block["modules"]:
        assert not m["error"] and m["repeats"] >= 10 and m["calls"] >= 1
        assert m["gap_low_us"] <= m["gap_us"] <= m["gap_high_us"]
        assert m["significant"] == (m["gap_low_us"] > 0 or m["gap_high_us"] < 0)
        assert m["inside"] >= inside[m["module"]]  # every profiled module inside it (and any the profile missed)
        if m["inside"]:  # timed whole: held against its subtree's profiled gaps, its self row left as profiled
            subtree = sum(v for k, v in steps.items() if k == m["module"] or k.startswith(m["module"] + "/"))
            assert m["profiled_gap_us"] == pytest.approx(subtree) and m["evidence"].startswith("whole module alone")
            row = next(r for r in d["by_module"] if r["key"] == m["module"])
            assert row["evidence"] == "profiled" and row.get("alone_gap_us") is None
            continue
        assert m["profiled_gap_us"] == pytest.approx(steps[m["module"]])
        # by_module carries the gap alone and whether it bore the profiled one out; one it did
        # not is within noise there (the summary and the fix plan rank by_module's significant)
        row = next(r for r in d["by_module"] if r["key"] == m["module"])
        same = m["significant"] and m["gap_us"] * m["profiled_gap_us"] > 0
        sized = m["gap_high_us"] - m["gap_low_us"] <= abs(m["gap_us"])  # the interval no wider than the gap
        assert row["alone_gap_us"] == m["gap_us"]
        assert row["evidence"] == m["evidence"] == (
            ("confirmed alone" if sized else "not sized alone") if same else
            "not reproduced alone" if not m["significant"] else "opposite sign alone")
        assert row["significant"] == (same and sized and m["profiled_significant"])
    assert "confirmed alone (eager vs xla" in r.stdout.replace("\n", " ")
    assert d["seconds"]["confirm"] > 0
    md = (tmp_path / "report.md").read_text()
    section = md.split("### Largest module gaps, confirmed alone")[1].split("###")[0]
    assert [line.split("|")[1].strip(" `") for line in section.splitlines() if line.startswith("| `")] == [
        m["module"] + (f" (whole, with the {m['inside']} modules inside)" if m["inside"] else "") for m in block["modules"]]
    assert 'id="t-confirmed"' in (tmp_path / "report.html").read_text()
