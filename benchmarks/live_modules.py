"""Check a live diagnosis against an independent per-module timing (a script, not a test).

For each model x target: `porter diagnose MODEL --from cpu --to TARGET` (library models built
from configs with random weights, tests/models/library_models.py), then each leaf module
among the diagnosis' top time gaps is run alone on both stacks with the input it saw in the
model (eager; torchax + jax.jit; torch.compile/inductor), median of repeats, interleaved.
Prints, per model x target: coverage, share split by estimate, the top 3 gaps by module with
the independent ratio beside the diagnosed one, the groups above 20x with theirs, and the top
3 fixes.

    .venv/bin/python -m benchmarks.live_modules [--models bert_small,...] [--targets xla,...]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import torch

LIBRARY = Path(__file__).resolve().parents[1] / "tests" / "models" / "library_models.py"
REPEATS = 30
BIG_RATIO = 20.0


def leaf_inputs(module: torch.nn.Module, inputs: tuple[Any, ...]) -> dict[str, tuple[Any, ...]]:
    """Porter path -> positional inputs of each leaf module's first call."""
    seen: dict[str, tuple[Any, ...]] = {}
    hooks = []
    for name, mod in module.named_modules():
        if name and not list(mod.children()):
            path = name.replace(".", "/")
            hooks.append(mod.register_forward_pre_hook(
                lambda m, a, _p=path: seen.setdefault(_p, tuple(x.detach().clone() if isinstance(x, torch.Tensor) else x for x in a))))
    with torch.no_grad():
        module(*inputs)
    for h in hooks:
        h.remove()
    return seen


def runner(stack: str, mod: torch.nn.Module, args: tuple[Any, ...]) -> Callable[[], Any]:
    """One call of mod(*args) on the stack, finished before it returns."""
    if stack == "xla":
        import jax

        from porter.targets.torchax_shim import import_torchax

        tx = import_torchax()
        env = tx.default_env()
        with torch.no_grad():
            weights, fn = tx.extract_jax(mod, env)
        jargs = tuple(env.t2j_copy(a) if isinstance(a, torch.Tensor) else a for a in args)
        jitted = jax.jit(fn)
        return lambda: jax.block_until_ready(jitted(weights, jargs))
    if stack == "inductor":
        compiled = torch.compile(mod, backend="inductor")

        def call() -> Any:
            with torch.no_grad():
                return compiled(*args)
        return call

    def eager() -> Any:
        with torch.no_grad():
            return mod(*args)
    return eager


def median_us(calls: dict[str, Callable[[], Any]], repeats: int) -> dict[str, float]:
    """Median wall time per call of each callable, interleaved so load drifts hit all alike."""
    for c in calls.values():
        c()
        c()
    samples: dict[str, list[float]] = {k: [] for k in calls}
    for _ in range(repeats):
        for k, c in calls.items():
            t0 = time.perf_counter()
            c()
            samples[k].append((time.perf_counter() - t0) * 1e6)
    return {k: statistics.median(v) for k, v in samples.items()}


def step_medians(ops: Any, times: Any) -> dict[str, float]:
    """Module -> median over profiled steps of its charged time in that step (robust to one
    preempted step on a loaded machine)."""
    import pandas as pd

    t = times.reindex(ops["op_id"].to_numpy()).fillna(0.0).to_numpy()
    f = pd.DataFrame({"module": ops["module"].to_numpy(), "step": ops["step"].to_numpy(), "t": t})
    f = f[f["step"] >= 0]
    per = f.groupby(["module", "step"])["t"].sum().unstack(fill_value=0.0)
    return per.median(axis=1).to_dict()


def check(model: str, target: str, out: Path) -> None:
    from porter.capture.models import load_model
    from porter.capture.options import CaptureOptions
    from porter.diagnose import diagnose_specs

    ref = f"{LIBRARY}:{model}"
    d, _ = diagnose_specs("cpu", target, out, model=ref, report=False,
                          capture_options=CaptureOptions(steps=3, warmup=1, repeats=5, activations=False))
    stats = d.alignment.stats
    cov = d.coverage()
    steps = max(d.e2e.source.n, 1)
    print(f"\n== {model}: cpu -> {target}")
    print(f"coverage: source {cov['source'] * 100:.2f}%, target {cov['target'] * 100:.2f}%; split by estimate: "
          f"source {stats.get('source_split_by_estimate_share', 0) * 100:.1f}%, "
          f"target {stats.get('target_split_by_estimate_share', 0) * 100:.1f}%; "
          f"unmatched outside modules: target {stats.get('target_unmatched_outside_modules_us', 0) / steps:.1f} us/step")
    spec = load_model(ref)
    leaves = leaf_inputs(spec.module, spec.example_inputs)
    mods = dict((n.replace(".", "/"), m) for n, m in spec.module.named_modules())
    stack = target.split(":")[-1]
    rows = d.by_module[d.by_module["key"].isin(leaves)]
    top = rows.reindex(rows["delta_us"].abs().sort_values(ascending=False).index).head(3)
    big = d.groups[(d.groups["ratio"] > BIG_RATIO) | (d.groups["ratio"] < 1 / BIG_RATIO)]
    wanted = list(dict.fromkeys([*top["key"], *[m for m in big["module"] if m in leaves]]))
    if stack not in ("xla", "inductor"):
        wanted = []  # single modules are timed on the torch and torchax stacks only
    indep = {}
    for path in wanted:
        try:
            t = median_us({"src": runner("eager", mods[path], leaves[path]),
                           "tgt": runner(stack, mods[path], leaves[path])}, REPEATS)
            indep[path] = t
        except Exception as exc:  # a module that does not run alone: said, not hidden
            print(f"  {path}: not run alone ({type(exc).__name__}: {str(exc)[:80]})")
    med = {side: step_medians(ops, times.values) for side, ops, times in
           (("src", d.alignment.source_ops, d.alignment.source_times), ("tgt", d.alignment.target_ops, d.alignment.target_times))}
    timed = stack in ("xla", "inductor")
    print("top 3 gaps by module (leaf modules; per step: diagnosed mean, diagnosed median over steps, run alone "
          f"median of {REPEATS} interleaved):")
    for r in top.itertuples():
        t = indep.get(r.key)
        alone = f"alone {t['src']:.1f} -> {t['tgt']:.1f} us (x{t['tgt'] / t['src']:.2f})" if t else "alone: not timed"
        ms, mt = med["src"].get(r.key, 0.0), med["tgt"].get(r.key, 0.0)
        print(f"  {r.key}: {r.source_us / steps:.1f} -> {r.target_us / steps:.1f} us (x{r.ratio:.2f}); "
              f"median {ms:.1f} -> {mt:.1f} us (x{mt / ms if ms else float('nan'):.2f}); {alone}")
    print(f"groups beyond {BIG_RATIO:g}x either way: {len(big)}")
    for r in big.itertuples():
        t = indep.get(r.module)
        alone = (f"alone x{t['tgt'] / t['src']:.2f}" if t else
                 "alone: not a leaf module" if timed and r.module not in leaves else "alone: not timed")
        print(f"  {r.module or '(root)'} [{r.evidence}]: {r.source_us / steps:.1f} -> {r.target_us / steps:.1f} us "
              f"(x{r.ratio:.2f}); {alone}")
    from reports.build import fix_where

    print("top 3 fixes:")
    for f in (d.extras.get("fixes") or [])[:3]:
        gain = f"saves up to {f['recoverable_us'] / steps:.0f} us/step" if f["kind"] == "perf" else "accuracy"
        print(f"  {f['title']}: {gain}, at {fix_where(f)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="bert_small,gpt2_small,small_resnet")
    ap.add_argument("--targets", default="xla,cpu:inductor,cpu:ort")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="porter-live-") as tmp:
        for model in a.models.split(","):
            for target in a.targets.split(","):
                check(model, target, Path(tmp) / f"{model}_{target.replace(':', '_')}")


if __name__ == "__main__":
    main()
