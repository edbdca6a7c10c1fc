"""Issue 26's check: `porter tune` whole-process on three pairs, each run twice in a row; does
the best combination's measured ratio of the second run fall inside the first's interval?

    python benchmarks/tune_runs.py [--budget 240] [--out DIR] [--pairs NAME ...]

Each run is `python -m porter diagnose MODEL --from cpu --to TARGET --confirm 0 --no-report
--tune --tune-budget BUDGET` into a fresh folder: the fix plan's recipes by estimate, then the
stack's others, so each run also gives the estimate's calibration (measured / estimated per fix,
diagnosis.json `tried.calibration`). The load average before and after each is printed beside it
(the machine is shared: intervals widen with it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAIRS = {
    "resnet-inductor": ("tests/models/library_models.py:small_resnet", "cpu:inductor"),
    "hf-resnet-inductor": ("tests/models/library_models.py:hf_resnet", "cpu:inductor"),
    "transformer-inductor": ("transformer", "cpu:inductor"),
    "transformer-xla": ("transformer", "xla"),
}


def run(model: str, target: str, out: Path, budget: float) -> dict:
    load0 = os.getloadavg()[0]
    t0 = time.monotonic()
    shutil.rmtree(out, ignore_errors=True)
    proc = subprocess.run([sys.executable, "-m", "porter", "diagnose", model, "--from", "cpu", "--to", target,
                           "--confirm", "0", "--no-report", "--tune", "--tune-budget", str(budget), "-o", str(out)],
                          cwd=REPO, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"porter diagnose --tune failed ({proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}")
    doc = json.loads((out / "tune" / "tune.json").read_text())
    tried = json.loads((out / "diagnosis.json").read_text())["tried"]
    return {"doc": doc, "calibration": tried["calibration"], "seconds": time.monotonic() - t0,
            "load": (load0, os.getloadavg()[0])}


def show(name: str, i: int, r: dict) -> None:
    doc = r["doc"]
    print(f"{name} run {i}: {r['seconds']:.0f} s, load {r['load'][0]:.1f} -> {r['load'][1]:.1f}")
    for c in doc["candidates"]:
        if c.get("status") != "measured":
            print(f"  {c['recipe']:28s} {c.get('status')}: {c.get('why')}")
            continue
        m, rec, a = c["measured"], c["recovered_us"], c["accuracy"]
        print(f"  {c['recipe']:28s} x{m['ratio']:.3f} [{m['ci95'][0]:.3f}, {m['ci95'][1]:.3f}]  "
              f"untuned x{c['untuned']['ratio']:.3f}  recovered {rec['value']:+.0f} us [{rec['ci95'][0]:+.0f}, "
              f"{rec['ci95'][1]:+.0f}]  rel_l2 {a['rel_l2']:.1e}  {'kept' if c['kept'] else 'not kept'}")
    for c in r["calibration"]:
        print(f"  calibration {c['recipe']:20s} ({c['fix_id']}): measured {c['measured_us']:+.0f} us / estimated "
              f"{c['estimated_us']:.0f} us = {c['measured_over_estimated']:+.2f}")
    best = doc["best"]
    print(f"  best: {' + '.join(best['recipes']) if best else 'none'}"
          + (f" x{best['measured']['ratio']:.3f} [{best['measured']['ci95'][0]:.3f}, {best['measured']['ci95'][1]:.3f}]" if best else ""))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=float, default=240.0)
    ap.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "porter-tune-runs")
    ap.add_argument("--pairs", nargs="*", default=list(PAIRS))
    args = ap.parse_args()
    for name in args.pairs:
        model, target = PAIRS[name]
        runs = [run(model, target, args.out / f"{name}-{i}", args.budget) for i in (1, 2)]
        for i, r in enumerate(runs, 1):
            show(name, i, r)
        b1, b2 = (r["doc"]["best"] for r in runs)
        if b1 and b2:
            lo, hi = b1["measured"]["ci95"]
            same = b1["recipes"] == b2["recipes"]
            inside = lo <= b2["measured"]["ratio"] <= hi
            print(f"  reproduces: same recipes {same}; run 2's x{b2['measured']['ratio']:.3f} inside run 1's "
                  f"[{lo:.3f}, {hi:.3f}]: {inside}")
        else:
            print(f"  reproduces: best {'none' if not b1 else '+'.join(b1['recipes'])} / {'none' if not b2 else '+'.join(b2['recipes'])}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
