"""Does the headline's 95% interval hold the figure an independent timing finds? Issue 25's check.

Each run: `porter diagnose MODEL --from cpu --to xla --confirm 0` as a whole process (its
headline and interval), then, in a fresh process, an independent figure: the same model's
eager forward and its torchax + jax.jit forward timed alternately on process CPU time with one
intra-op thread and freed memory kept (the policy porter states), written here rather than
through porter's interleaver, for BUDGET_S seconds; the figure is the median of the pairs'
ratios. A run is covered when that figure lies in the headline's interval. Modes:

- quiet: nothing beside;
- busy: one busy loop (`yes > /dev/null`) per CPU but one, all through both measurements;
- drift: the busy loop on for the diagnosis only (the independent figure on a quieter machine):
  the machine's state changes between the two, as it does between two runs minutes apart.

    .venv/bin/python -m benchmarks.headline_coverage [--runs 10] [--modes quiet,busy,drift] [--model transformer] [--jsonl F]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUDGET_S = 10.0

_INDEPENDENT = r'''
import json, statistics, sys, time
import torch
torch.set_num_threads(1)
from porter.runtime.threads import applied, current, one_cpu_while_xla_starts
from porter.runtime.allocator import keep_freed_memory
keep_freed_memory()
with applied(current()):
    import jax
    with one_cpu_while_xla_starts():
        jax.devices()
    from porter.capture.models import load_model
    from porter.targets.torchax_shim import import_torchax
    spec = load_model(sys.argv[1])
    mod, args = spec.module.eval(), spec.example_inputs
    tx = import_torchax(); env = tx.default_env()
    with torch.no_grad():
        weights, fn = tx.extract_jax(mod, env)
    jargs = tuple(env.t2j_copy(a) if isinstance(a, torch.Tensor) else a for a in args)
    jitted = jax.jit(fn)
    def eager():
        with torch.no_grad():
            mod(*args)
    def xla():
        jax.block_until_ready(jitted(weights, jargs))
    for _ in range(5):
        eager(); xla()
    ratios, end = [], time.monotonic() + float(sys.argv[2])
    while time.monotonic() < end:
        t0 = time.process_time(); eager(); t1 = time.process_time(); xla(); t2 = time.process_time()
        ratios.append((t2 - t1) / (t1 - t0))
    print(json.dumps({"ratio": statistics.median(ratios), "n": len(ratios)}))
'''


def busy_loops() -> list[subprocess.Popen]:
    # `yes` itself, not a shell around it: killing a shell left its `yes` running (load 1 -> 16 over a run)
    return [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(max((os.cpu_count() or 2) - 1, 1))]


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.kill()
        p.wait()


def diagnosed(model: str, out: Path) -> dict:
    subprocess.run([sys.executable, "-m", "porter", "diagnose", model, "--from", "cpu", "--to", "xla",
                    "--confirm", "0", "--no-report", "-o", str(out)], check=True, cwd=REPO,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    return json.loads((out / "diagnosis.json").read_text())["headline"]


def independent(model: str) -> float:
    r = subprocess.run([sys.executable, "-c", _INDEPENDENT, model, str(BUDGET_S)], check=True, cwd=REPO,
                       capture_output=True, text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    return float(json.loads(r.stdout.strip().splitlines()[-1])["ratio"])


def one_run(model: str, mode: str, out: Path) -> tuple[dict, float, float]:
    load = os.getloadavg()[0]
    procs = busy_loops() if mode in ("busy", "drift") else []
    try:
        h = diagnosed(model, out)
        if mode == "drift":
            stop(procs)
            procs = []
            time.sleep(2)
        ind = independent(model)
    finally:
        stop(procs)
    return h, ind, load


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--modes", default="quiet,busy,drift")
    ap.add_argument("--model", default="transformer")
    ap.add_argument("--jsonl", type=Path, help="also append one JSON line per run (headline, independent, load)")
    a = ap.parse_args()
    for mode in a.modes.split(","):
        covered = 0
        for k in range(a.runs):
            with tempfile.TemporaryDirectory() as tmp:
                h, ind, load = one_run(a.model, mode, Path(tmp) / "d")
            lo, hi = h["ci95"]
            ok = lo <= ind <= hi
            covered += ok
            if a.jsonl:
                with a.jsonl.open("a") as fh:
                    fh.write(json.dumps({"model": a.model, "mode": mode, "run": k + 1, "headline": h,
                                         "independent": ind, "load": load}) + "\n")
            print(f"{mode} run {k + 1}: headline x{h['ratio']:.3f} [{lo:.3f}, {hi:.3f}] ({h['method']}); "
                  f"independent x{ind:.3f}: {'covered' if ok else 'MISSED'}; load {load:.1f}", flush=True)
        print(f"== {mode}: {covered}/{a.runs} covered", flush=True)


if __name__ == "__main__":
    main()
