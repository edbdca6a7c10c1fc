"""A planted median on XLA: the sort's comparator is the planted module's work, not "(no module)".

transformers' Llama from a tiny config (tests/models/planted_slow.py) with ``torch.median`` after
the activation of model/layers/1/mlp/act_fn. Eager selects the median; XLA sorts every row, and
before profilers/xla_hlo.py gave called computations their caller's module, 60% of the sort's time
read "compare (no module)", the module 3.7x instead of ~9x, and the top fix named compare.
"""

from __future__ import annotations

import pytest

from porter.bundles.bundle import load_bundle
from porter.capture.run import capture
from porter.pipeline.diagnose import analyse
from tests.e2e.test_live_identity import LIVE_OPTS, MODELS
from tests.models.planted_slow import planted_path

MODEL = f"{MODELS / 'planted_slow.py'}:llama_median"


def _captured_pair(model: str, target: str, tmp_path):
    """Source (cpu) and target bundles of one live model, captured on one intra-op thread."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        capture(model, "cpu", tmp_path / "src", LIVE_OPTS)
        capture(model, target, tmp_path / "tgt", LIVE_OPTS)
    finally:
        torch.set_num_threads(threads)
    return load_bundle(tmp_path / "src"), load_bundle(tmp_path / "tgt")


@pytest.mark.slow
def test_a_planted_sort_is_charged_to_its_module_and_coverage_adds_up(tmp_path):

    PLANTED = planted_path("llama_median")  # noqa: N806 (the module the factory planted its median in)

    src, tgt = _captured_pair(MODEL, "xla", tmp_path)
    ops = tgt.ops
    sort = ops[ops["framework_op"] == "sort"]
    assert len(sort) and set(sort["module"]) == {PLANTED}, sorted(set(sort["module"]))
    assert set(sort["call"]) == {"median#0"} and (sort["members"] == "").all()  # a comparator is no fusion
    # no time of the live pair in module '' on the target: XLA's comparator compares ('ne', 'lt')
    # and a cumulative sum's inlined add ('reduce_window_sum') are their callers' work
    assert not (ops["module"] == "").any(), ops.loc[ops["module"] == "", "name"].unique()[:10]
    assert not ops["members"].str.contains(r'\["", ', regex=True).any()

    d = analyse(src, tgt)
    by_module = d.by_module.set_index("key")
    assert by_module["delta_us"].idxmax() == PLANTED, by_module["delta_us"].nlargest(3)
    planted = by_module.loc[PLANTED]
    assert planted["ratio"] > 3.0  # a full sort against a selection: several times eager's
    top = d.fixes[0]
    assert "sort" in top["title"].lower() or top.get("framework_op") == "sort", top["title"]
    # coverage, the runtime's time outside every module and the other unmatched time add up
    stats, cov = d.alignment.stats, d.coverage()
    for side in ("source", "target"):
        total = cov[side] + stats[f"{side}_unmatched_outside_modules_share"] + stats[f"{side}_unmatched_other_share"]
        assert total == pytest.approx(1.0), (side, cov, stats)
    assert stats["target_unmatched_outside_modules_share"] == 0.0  # XLA's ops are all the model's
    assert cov["target"] >= 0.98


@pytest.mark.slow
def test_a_planted_erfinv_under_inductor_gets_the_eager_fix_first(tmp_path):
    """Inductor generates a slow erfinv for the planted activation: its module leads by_module,
    and fix #1 leaves that module to eager (before eager-module-in-compiled, fix #1 was the
    graph wrapper's 1-4 day fix and the module's only fix a 5-15 day kernel)."""

    model, planted = f"{MODELS / 'planted_slow.py'}:llama_erfinv", planted_path("llama_erfinv")
    d = analyse(*_captured_pair(model, "cpu:inductor", tmp_path))
    by_module = d.by_module[d.by_module["key"] != ""].set_index("key")  # "": the compiled graph's wrapper, no module's
    assert by_module["delta_us"].idxmax() == planted, by_module["delta_us"].nlargest(3)
    top = next(f for f in d.fixes if f["kind"] == "perf")
    assert top["fix_id"] == "eager-module-in-compiled" and planted in top["modules"], [
        (f["fix_id"], f["modules"][:1], f["closes_gap_us"], f["days"]) for f in d.fixes[:4]]
    assert top["beyond_parity_us"] == 0.0 and 0 < top["closes_gap_us"] <= top["measured_gap_us"] + 1e-6
    # the root's row in the summary says what it holds (the compiled graph's runtime), not just "(no module)"
    import orjson

    from porter.pipeline.document import encode, to_json
    from reports.terminal import summary_lines

    doc = orjson.loads(encode(to_json(d)))
    kinds = doc["alignment"]["stats"]["target_outside_modules_by_kind_us"]
    assert kinds.get("graph wrapper and runtime dispatch", 0) > 0, kinds
    lines = summary_lines(doc, width=200)
    rows = [line for line in lines if "(no module" in line and line.lstrip()[:1] in "+-"]  # table rows, not fixes
    assert rows and all("(no module: graph wrapper and runtime dispatch" in r for r in rows), lines
    # and report.md / report.html name it alike: one name for the root's row in every view
    from reports.build import model_from_diagnosis
    from reports.render import render_all

    md = render_all(model_from_diagnosis(doc), ["md"])["report.md"]
    assert "(no module: graph wrapper and runtime dispatch" in md and "| (no module) |" not in md
