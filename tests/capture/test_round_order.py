"""The order of timed rounds (porter.capture.interleaved.time_rounds): with three sides no side
may be the only one that never runs right after itself, nor hold the middle alone (a tune's
untuned target did both, and a recipe with no settings read as +55-85 us recovered)."""

from __future__ import annotations

from collections import Counter

from porter.capture.interleaved import InterleaveOptions, time_rounds


def calls(names: list[str], rounds: int) -> list[str]:
    seen: list[str] = []
    steps = {n: (lambda n=n: seen.append(n)) for n in names}
    opts = InterleaveOptions(warmup=0, min_pairs=rounds, max_pairs=rounds, budget_s=0.0)
    time_rounds(steps, opts)
    return seen


def test_three_sides_share_the_middle_and_the_repeats():
    seq = calls(["source", "untuned", "tuned"], 40)
    assert len(seq) == 120
    rounds = [seq[i:i + 3] for i in range(0, 120, 3)]
    middle = Counter(r[1] for r in rounds)
    assert middle["untuned"] == middle["tuned"] == 20 and middle["source"] == 0
    repeats = Counter(a for a, b in zip(seq, seq[1:]) if a == b)
    # the two a recovery compares repeat alike; the source (every ratio's reference) once more per
    # four rounds: no four-round cycle balances all three, and it moves both ratios of the source alike
    assert repeats["untuned"] == repeats["tuned"] == 10 and repeats["source"] == 19
    for a, b in (("source", "untuned"), ("source", "tuned"), ("untuned", "tuned")):
        first = Counter(r.index(a) < r.index(b) for r in rounds)
        assert first[True] == first[False] == 20, (a, b)


def test_two_sides_keep_the_headlines_ab_ba():
    seq = calls(["source", "target"], 6)
    assert seq == ["source", "target", "target", "source"] * 3
