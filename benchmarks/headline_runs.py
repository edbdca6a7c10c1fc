"""Issue #10's check: three consecutive `porter diagnose` runs of the README demo with a busy
loop beside them; do their headline intervals overlap?

    python benchmarks/headline_runs.py [--sets N] [--loops K] [--out DIR]

Each set starts K busy loops (`while True: pass`), runs the demo N=3 times back to back as
whole processes, stops the loops, and prints each run's headline, its interval and clock,
the 1-minute load average around the set, and whether the three intervals share a point.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEMO = ["diagnose", "transformer", "--from", "cpu", "--to", "xla"]


def headline(out: Path) -> dict:
    return json.loads((out / "diagnosis.json").read_text())["headline"]


def one_set(runs: int, loops: int, root: Path) -> bool:
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(loops)]
    load0 = os.getloadavg()[0]
    heads = []
    try:
        for i in range(runs):
            out = root / f"run{i + 1}"
            subprocess.run([sys.executable, "-m", "porter", *DEMO, "-o", str(out)], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}, cwd=REPO)
            heads.append(headline(out))
    finally:
        for p in busy:
            p.kill()
            p.wait()
    lows, highs = [h["ci95"][0] for h in heads], [h["ci95"][1] for h in heads]
    overlap = None not in lows + highs and max(lows) <= min(highs)
    runs_text = "; ".join(f"x{h['ratio']:.3f} [{h['ci95'][0]:.3f}, {h['ci95'][1]:.3f}] "
                          f"({h['pairs'].get('clock', 'wall')}{', wide' if h['wide'] else ''})" for h in heads)
    print(f"load {load0:.1f}-{os.getloadavg()[0]:.1f}: {runs_text}: {'overlap' if overlap else 'NO overlap'}",
          flush=True)
    return bool(overlap)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", type=int, default=1)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--loops", type=int, default=1, help="busy loops beside each set")
    ap.add_argument("--out", type=Path, default=None, help="keep the diagnoses here (default: a temp folder)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = a.out or Path(tmp)
        met = sum(one_set(a.runs, a.loops, root / f"set{s + 1}") for s in range(a.sets))
    print(f"{met} of {a.sets} sets overlap")


if __name__ == "__main__":
    main()
