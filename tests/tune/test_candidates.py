"""The tune's candidate order: a diagnosis's recipes by estimate, then the stack's others."""

from __future__ import annotations

from porter.analysis.fixes import load_catalogue
from porter.tune.candidates import plan


def test_a_diagnosis_orders_its_recipes_first_then_tries_the_rest():
    catalogue = load_catalogue(None)
    every = [r.name for r in catalogue.recipes("inductor-cpp") if not r.runnable_here]
    est = {"cut-graph-wrapper": 90.0, "vendor-gemm-tuning": 300.0, "not-a-recipe-fix": 1000.0}
    chosen = plan(catalogue, "transformer", "cpu", "cpu:inductor", "inductor-cpp", (), est, "diag")
    names = [c.recipe.name for c in chosen.candidates]
    assert names[:2] == ["max-autotune", "cpp-wrapper"]  # vendor-gemm-tuning's estimate is the larger
    assert sorted(names) == sorted(every) and len(names) == len(set(names))
    assert [c.estimated_us for c in chosen.candidates[:2]] == [300.0, 90.0]
    assert all(c.estimated_us is None for c in chosen.candidates[2:])
    assert names[2:] == [n for n in every if n not in names[:2]]  # the rest in the catalogue's order
