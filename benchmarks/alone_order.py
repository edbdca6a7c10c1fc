"""Two alone timings of the same modules in one process: porter's confirmation against
benchmarks/live_modules.py's alone_times, in a chosen order, for several rounds.

Why: on llama_base -> cpu:inductor porter's confirmation read each RMSNorm's gap wider and more
negative than the script's alone timing (one miss of 43 in BENCHMARKS.md's 2026-12-06 table,
x1.50). Here both time the model's RMSNorms (eager against inductor, 30 repeats, no budget, one
thread), so a difference between them is the order or the method, not the model run.

    python -m benchmarks.alone_order --first porter --rounds 2

Prints per round the ratio porter gap / script gap over the modules (min-max), how many are
beyond 1.5x, and the median eager time per call on the source side.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=f"{ROOT / 'tests' / 'models' / 'library_models.py'}:llama_base")
    ap.add_argument("--suffix", default="layernorm", help="time the modules whose path ends with this")
    ap.add_argument("--first", choices=("porter", "script"), default="porter")
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(1)
    sys.path.insert(0, str(ROOT))
    from benchmarks.live_modules import alone_times, leaf_inputs
    from porter.capture.confirm import confirm
    from porter.capture.models import load_model

    spec = load_model(a.model)
    mods = {n.replace(".", "/"): m for n, m in spec.module.named_modules()}
    paths = [p for p in mods if p and p.endswith(a.suffix)]
    if not paths:
        raise SystemExit(f"no module of {a.model} ends with {a.suffix!r}: pass --suffix")
    leaves = leaf_inputs(spec.module, spec.example_inputs)

    def porter_side() -> dict:
        return {c.module: c for c in confirm(spec.module, spec.example_inputs, paths, "eager", "inductor",
                                             cpu_clock=True, repeats=30, budget_s=math.inf)}

    def script_side() -> dict:
        return alone_times("inductor", mods, {p: leaves[p] for p in paths}, 30)

    for rnd in range(a.rounds):
        if a.first == "porter":
            ours, theirs = porter_side(), script_side()
        else:
            theirs = script_side()
            ours = porter_side()
        # a module that did not replay on either side (a NaN gap, or absent from the script's) is left out
        ratios = [ours[p].gap_us / theirs[p].gap for p in paths
                  if p in theirs and theirs[p].gap and not ours[p].error]
        if not ratios:
            raise SystemExit(f"round {rnd}: no module timed on both sides")
        src = statistics.median(ours[p].source_us for p in paths if not ours[p].error)
        print(f"round {rnd} ({a.first} first): porter/script gap x{min(ratios):.2f}-x{max(ratios):.2f} over "
              f"{len(ratios)} modules, beyond 1.5x: {sum(not (1 / 1.5 <= r <= 1.5) for r in ratios)}; "
              f"porter's eager median {src:.1f} us")


if __name__ == "__main__":
    main()
