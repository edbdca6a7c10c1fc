"""Is the planted slow module first? Issue 24's bar, as a script (not a test).

For each planted model x target (tests/models/planted_slow.py: a median planted for --to xla,
an erfinv for --to cpu:inductor) run `porter diagnose FACTORY --from cpu --to TARGET` as a user
does (a whole process, default options) RUNS times, and check three places:

- by_module: the first significant row by the gap porter ranks (alone where --confirm sized it,
  else per unprofiled step), largest loss first (the order porter writes by_module in), is the
  planted module (or inside it). Not by |gap|: a real win as large as the plant then takes the
  place by a coin toss (resnet_erfinv's embedder pooler, max pooling, read -579 us per forward
  alone against the plant's +574 us);
- the terminal summary: the first "largest losses" row names it (instance numbers folded);
- fix #1 names it (or a module inside it) among its modules; and the first fix for work inside a
  module does (fixes for time outside every module, e.g. inductor's graph wrapper, can rank first
  by gap closed per engineer-day).

Optionally beside a busy loop (`--busy`: one `yes > /dev/null` per CPU but one). Prints one line
per run and a tally per case; `--keep DIR` keeps each missed run's output folder (diagnosis.json,
the report, stdout) as DIR/FACTORY-TARGET-runK, so a miss can be read after the run.

    .venv/bin/python -m benchmarks.planted_runs [--runs 6] [--busy] [--keep DIR] [--cases llama_median:xla,...]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "tests" / "models" / "planted_slow.py"
CASES = ("llama_median:xla", "resnet_median:xla", "vit_median:xla",
         "llama_erfinv:cpu:inductor", "resnet_erfinv:cpu:inductor", "vit_erfinv:cpu:inductor")


def planted(factory: str) -> str:
    sys.path.insert(0, str(MODELS.parent))
    import planted_slow

    return planted_slow.planted_path(factory)


def inside(key: str, module: str) -> bool:
    return key == module or key.startswith(module + "/")


def folded(module: str) -> re.Pattern[str]:
    """The planted path with any instance number free: the summary folds instances into kinds."""
    return re.compile("^" + "/".join(r"(\d+|\*)" if p.isdigit() else re.escape(p) for p in module.split("/")))


def by_module_top(d: dict, n: int = 2) -> list[tuple[str, float]]:
    """The first n significant module rows by the gap the rankings read, largest loss first, (key,
    gap us): alone where --confirm sized it (ranked_gap_us), else per unprofiled step."""
    rows = [r for r in d["by_module"] if r.get("significant", True) and r["key"]]

    def gap(r: dict) -> float:
        g = r.get("ranked_gap_us")
        return g if isinstance(g, (int, float)) else (r.get("target_step_us") or 0.0) - (r.get("source_step_us") or 0.0)

    return [(r["key"], gap(r)) for r in sorted(rows, key=gap, reverse=True)[:n]]


def losses_top(stdout: str, n: int = 2) -> list[tuple[str, str]]:
    """The summary's first n "largest losses" rows by module kind, (name, gap as printed)."""
    lines = stdout.splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith("largest losses (target slower) by module"))
    out = []
    for line in lines[i + 1:i + 1 + n]:
        row = line.split()
        if not row or row[0] == "(none)" or not line.startswith(" "):
            break
        out.append((line.split("  ")[-1].strip(), row[0]))
    return out


def margin(rows: list, first: str) -> str:
    """'first +a vs next +b' for the per-run line: how close the runner-up came."""
    return " vs ".join(f"{k if k != first else 'it'} {g if isinstance(g, str) else f'{g:+.0f} us'}" for k, g in rows)


def one_run(factory: str, target: str, out: Path) -> dict:
    r = subprocess.run([sys.executable, "-m", "porter", "diagnose", f"{MODELS}:{factory}", "--from", "cpu",
                        "--to", target, "-o", str(out)], capture_output=True, text=True,
                       env=dict(os.environ, COLUMNS="200"), cwd=REPO)
    (out.parent / "stdout.txt").write_text(r.stdout + r.stderr)
    if r.returncode != 0:
        return {"error": r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"}
    d = json.loads((out / "diagnosis.json").read_text())
    fix = next((f for f in d["fixes"] if f["kind"] == "perf"), None)
    # the first fix for work inside a module: fixes for time outside every module (the compiled
    # graph's wrapper, guard checks) rank by gap closed per engineer-day too, and a cheap one can lead
    in_module = next((f for f in d["fixes"] if f["kind"] == "perf" and any(f["modules"])), None)
    bm, losses = by_module_top(d), losses_top(r.stdout)
    return {"by_module": bm[0][0] if bm else "", "summary": losses[0][0] if losses else "",
            "by_module_top": bm, "summary_top": losses,
            "fix1": fix["modules"] if fix else [], "fix1_title": fix["title"] if fix else "",
            "module_fix1": in_module["modules"] if in_module else [],
            "headline": d["headline"]["ratio"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--busy", action="store_true")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--keep", type=Path, default=None, help="copy each missed run's output folder here")
    a = ap.parse_args()
    from benchmarks.headline_coverage import busy_loops, stop

    busy = busy_loops() if a.busy else []  # `yes` itself: a shell around it left `yes` running when killed
    try:
        for case in a.cases.split(","):
            factory, target = case.split(":", 1)
            module = planted(factory)
            pattern = folded(module)
            hits = {"by_module": 0, "summary": 0, "fix1": 0, "module_fix1": 0}
            for k in range(a.runs):
                with tempfile.TemporaryDirectory() as tmp:
                    got = one_run(factory, target, Path(tmp) / "d")
                    ok = {} if "error" in got else {
                        "by_module": inside(got["by_module"], module), "summary": bool(pattern.match(got["summary"])),
                        "fix1": any(inside(m, module) for m in got["fix1"]),
                        "module_fix1": any(inside(m, module) for m in got["module_fix1"])}
                    if a.keep is not None and not all(ok.values() or [False]):
                        shutil.copytree(tmp, a.keep / f"{factory}-{target.replace(':', '_')}-run{k + 1}", dirs_exist_ok=True)
                if "error" in got:
                    print(f"{factory} -> {target} run {k + 1}: FAILED {got['error']}")
                    continue
                for key, v in ok.items():
                    hits[key] += v
                print(f"{factory} -> {target} run {k + 1} (load {os.getloadavg()[0]:.1f}): headline x{got['headline']:.2f}; by_module {got['by_module']} "
                      f"{'ok' if ok['by_module'] else 'MISS'} ({margin(got['by_module_top'], got['by_module'])}); "
                      f"summary {got['summary']} {'ok' if ok['summary'] else 'MISS'} ({margin(got['summary_top'], got['summary'])}); "
                      f"fix #1 {got['fix1_title'][:60]} @ {', '.join(got['fix1'][:2])} {'ok' if ok['fix1'] else 'MISS'}; "
                      f"first fix in a module {'ok' if ok['module_fix1'] else 'MISS'}",
                      flush=True)
            print(f"== {factory} -> {target} ({module}): first in by_module {hits['by_module']}/{a.runs}, "
                  f"summary {hits['summary']}/{a.runs}, fix #1 {hits['fix1']}/{a.runs}, first fix in a module "
                  f"{hits['module_fix1']}/{a.runs}"
                  f"{' beside a busy loop' if busy else ''}", flush=True)
    finally:
        stop(busy)


if __name__ == "__main__":
    main()
