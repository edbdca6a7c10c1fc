"""What `porter tune` keeps once its recipes are judged as a family (porter.tune.run.holm_correct)."""

from __future__ import annotations

from porter.tune.run import holm_correct


def _cand(name: str, p: float, kept: bool = True, status: str = "measured") -> dict:
    why = "recovers +120 us per forward [+10, +230], accuracy within tolerance" if kept else "slower: ..."
    return {"recipe": name, "status": status, "kept": kept, "why": why, "recovery": {"p": p}}


def test_two_recoveries_each_significant_alone_are_not_kept_when_the_family_is_four():
    cands = [_cand("a", 0.03), _cand("b", 0.04), _cand("c", 0.6, kept=False), _cand("d", 0.9, kept=False),
             {"recipe": "e", "status": "failed", "kept": False, "why": "failed: x"}]
    holm_correct(cands)
    assert [c["kept"] for c in cands] == [False] * 5
    assert cands[0]["holm"] == {"p": 0.03, "family": 4, "alpha": 0.05, "rejects_no_change": False}
    assert "not beyond chance over 4 recipes tried (Holm: p = 0.03)" in cands[0]["why"]
    assert cands[0]["why"].startswith("recovers +120 us per forward [+10, +230]")
    assert "holm" not in cands[4]  # a failed recipe was not a test


def test_a_strong_recovery_stays_kept_and_lets_the_next_be_judged_at_a_looser_level():
    cands = [_cand("a", 0.001), _cand("b", 0.02), _cand("c", 0.5, kept=False)]
    holm_correct(cands)  # 0.001 <= 0.05/3, then 0.02 <= 0.05/2, then 0.5 > 0.05 stops
    assert [c["kept"] for c in cands] == [True, True, False]
    assert [c["holm"]["rejects_no_change"] for c in cands] == [True, True, False]
    assert cands[1]["why"].endswith("accuracy within tolerance")
