"""Issue 25's check: do `porter bench MODEL --on cpu --on xla` and `porter diagnose MODEL --from cpu
--to xla` agree, now that both run under one measurement policy (porter/runtime/policy.py)?

Per model, two runs of each command (bench, diagnose, diagnose, bench): the bench run (stored
in a scratch SQLite file) gives xla/eager as the ratio of medians with its 95% bootstrap
interval; the diagnosis gives its headline target/source with its 95% interval. The two agree
when the intervals overlap. Prints a Markdown table
(BENCHMARKS.md, "One measurement policy: bench against diagnose").

    python benchmarks/bench_agreement.py transformer tests/models/library_models.py:bert_small
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

PORTER = [sys.executable, "-m", "porter"]


def bench_ratio(model: str, work: Path) -> tuple[float, float, float, str]:
    from porter.bench.stats import cross_stack_ratio_ci
    from porter.bench.store import Store

    db = work / "bench.sqlite"
    subprocess.run([*PORTER, "bench", model, "--on", "cpu", "--on", "xla", "--db", str(db), "--export",
                    str(work / "runs")], check=True, capture_output=True, text=True)
    store = Store(db)
    run = store.load_run(store.runs()[-1].id)
    eager, xla = run.results
    ratio, lo, hi = cross_stack_ratio_ci(xla.samples_s, eager.samples_s, run.context.get("measurement"))
    return ratio, lo, hi, run.context["measurement"]["summary"]


def diagnose_ratio(model: str, work: Path) -> tuple[float, float, float, str]:
    out = work / "diag"
    subprocess.run([*PORTER, "diagnose", model, "--from", "cpu", "--to", "xla", "-o", str(out), "--no-report",
                    "--confirm", "0"], check=True, capture_output=True, text=True)
    h = json.loads((out / "diagnosis.json").read_text())["headline"]
    lo, hi = h["ci95"]
    return h["ratio"], lo, hi, h["pairs"]["measurement"]["summary"]


def main(models: list[str]) -> None:
    """Per model, in the order bench, diagnose, diagnose, bench (so a drift of the machine's
    load lands on both commands alike): one row per run, then whether the intervals overlap."""
    print("| model | run | command | xla/eager | 95% interval |")
    print("|---|--:|---|--:|---|")
    for model in models:
        got: dict[str, list[tuple[float, float, float, str]]] = {"bench": [], "diagnose": []}
        for i, command in enumerate(("bench", "diagnose", "diagnose", "bench"), 1):
            with tempfile.TemporaryDirectory() as tmp:
                r = (bench_ratio if command == "bench" else diagnose_ratio)(model, Path(tmp))
            got[command].append(r)
            print(f"| {model} | {i} | {command} | x{r[0]:.3f} | [{r[1]:.3f}, {r[2]:.3f}] |", flush=True)
        pairs = [(b, d) for b in got["bench"] for d in got["diagnose"]]
        overlap = sum(b[1] <= d[2] and d[1] <= b[2] for b, d in pairs)
        print(f"<!-- {model}: {overlap} of {len(pairs)} bench/diagnose pairs overlap; policy: {got['bench'][0][3]} -->",
              flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["transformer", "tests/models/library_models.py:bert_small"])
