"""Check a live diagnosis against an independent per-module timing (a script, not a test).

For each model x target: `porter diagnose MODEL --from cpu --to TARGET` (library models built
from configs with random weights, tests/models/library_models.py; `*_wide` are sizes where
compute outweighs a call's dispatch), then every leaf module is run alone on both stacks with
the input it saw in the model (eager; torchax + jax.jit; torch.compile/inductor), median of
repeats, interleaved, less each stack's per-call floor (the cheapest call it can make: a
module inside the compiled program does not pay the guards and dispatch of a call alone).
Prints, per model x target: coverage, share split by estimate, host work left out of
coverage, the diagnosed top 3 gaps by leaf module beside their alone timing, the alone top
3 and how many agree, the groups above 20x with their alone ratio, and the top 3 fixes.
One intra-op thread by default (a shared machine: OpenMP kernels wait for descheduled threads).

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
        import torch._dynamo as dynamo

        dynamo.reset()  # each module compiled afresh: shared forwards would hit the recompile limit and run eager
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


class _Floor(torch.nn.Module):
    """The cheapest call a stack can make (one add on one element): what every call alone pays."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1


def alone_times(stack: str, mods: dict[str, torch.nn.Module], leaves: dict[str, tuple[Any, ...]]) -> dict[str, dict[str, float]]:
    """Each leaf run alone on both stacks (median of REPEATS interleaved), less each stack's
    floor: a module inside the compiled program does not pay the per-call guards and dispatch
    that the same module pays when called alone."""
    floor = median_us({"src": runner("eager", _Floor(), (torch.ones(1),)),
                       "tgt": runner(stack, _Floor(), (torch.ones(1),))}, REPEATS)
    print(f"  per-call floor alone: eager {floor['src']:.1f} us, {stack} {floor['tgt']:.1f} us (subtracted)")
    out = {}
    for path, args in leaves.items():
        try:
            t = median_us({"src": runner("eager", mods[path], args), "tgt": runner(stack, mods[path], args)}, REPEATS)
        except Exception as exc:  # a module that does not run alone: said, not hidden
            print(f"  {path}: not run alone ({type(exc).__name__}: {str(exc)[:80]})")
            continue
        out[path] = {k: max(t[k] - floor[k], 0.0) for k in t}
    return out


def top3(gaps: dict[str, float]) -> list[str]:
    return sorted(gaps, key=lambda k: -abs(gaps[k]))[:3]


def check(model: str, target: str, out: Path) -> dict[str, Any]:
    """One model x target: the diagnosis, then its leaf modules timed alone. Returns the figures."""
    from porter.capture.models import load_model
    from porter.capture.options import CaptureOptions
    from porter.diagnose import diagnose_specs

    ref = f"{LIBRARY}:{model}"
    d, _ = diagnose_specs("cpu", target, out, model=ref, report=False,
                          capture_options=CaptureOptions(steps=5, warmup=1, repeats=5, activations=False))
    stats = d.alignment.stats
    cov = d.coverage()
    steps = max(d.e2e.source.n, 1)
    print(f"\n== {model}: cpu -> {target}")
    print(f"coverage: source {cov['source'] * 100:.2f}%, target {cov['target'] * 100:.2f}%; split by estimate: "
          f"source {stats.get('source_split_by_estimate_share', 0) * 100:.1f}%, "
          f"target {stats.get('target_split_by_estimate_share', 0) * 100:.1f}%; host work outside every module, "
          f"unpaired (left out of coverage): target {stats.get('target_unmatched_outside_modules_share', 0) * 100:.1f}% "
          f"({stats.get('target_unmatched_outside_modules_us', 0) / steps:.1f} us/step)")
    spec = load_model(ref)
    leaves = leaf_inputs(spec.module, spec.example_inputs)
    mods = dict((n.replace(".", "/"), m) for n, m in spec.module.named_modules())
    stack = target.split(":")[-1]
    rows = d.by_module[d.by_module["key"].isin(leaves)].set_index("key")
    # beside the profiled time per step, the diagnosis' step-scaled figure: each module's share of
    # its side's profiled time times that side's unprofiled step from the interleaved timing (load
    # drift between the captures cancels, but an eager model's Python time between ops is spread
    # over its modules), as diagnosis.json's groups carry it (porter.analysis.headline)
    sides = (d.extras.get("headline") or {}).get("sides") or {}
    scale = {role: (sides[role]["unprofiled_step_s"] * 1e6 / total if sides and total > 0 else 1.0 / steps)
             for role, total in (("source", d.alignment.source_times.total), ("target", d.alignment.target_times.total))}
    rows = rows.assign(src_step=rows["source_us"] * scale["source"], tgt_step=rows["target_us"] * scale["target"])
    diag_gap = (rows["delta_us"] / steps).to_dict()
    big = d.groups[(d.groups["ratio"] > BIG_RATIO) | (d.groups["ratio"] < 1 / BIG_RATIO)]
    alone = alone_times(stack, mods, leaves) if stack in ("xla", "inductor") else {}
    result: dict[str, Any] = {"coverage": cov, "big": len(big)}
    print("top 3 gaps by leaf module, diagnosed (profiled, each op call's median over steps) beside alone "
          f"(median of {REPEATS} interleaved, less the floor):")
    for key in top3(diag_gap):
        r = rows.loc[key]
        t = alone.get(key)
        a = f"alone {t['src']:.1f} -> {t['tgt']:.1f} us (x{t['tgt'] / t['src'] if t['src'] else float('nan'):.2f})" if t else "alone: not timed"
        print(f"  {key}: {r.source_us / steps:.1f} -> {r.target_us / steps:.1f} us/step (x{r.ratio:.2f}; step-scaled "
              f"{r.src_step:.1f} -> {r.tgt_step:.1f}); {a}")
    if alone:
        alone_gap = {k: v["tgt"] - v["src"] for k, v in alone.items()}
        dt, at = top3(diag_gap), top3(alone_gap)
        same_sign = sum(1 for k in dt if k in alone_gap and (alone_gap[k] > 0) == (diag_gap[k] > 0))
        print(f"top 3 alone: {', '.join(f'{k} ({alone_gap[k]:+.1f} us)' for k in at)}")
        print(f"agreement: {len(set(dt) & set(at))}/3 of the diagnosed top 3 are in the alone top 3; "
              f"{same_sign}/3 have the same sign of gap alone")
        result.update(overlap=len(set(dt) & set(at)), same_sign=same_sign)
    print(f"groups beyond {BIG_RATIO:g}x either way: {len(big)}")
    for r in big.itertuples():
        t = alone.get(r.module)
        a = (f"alone x{t['tgt'] / t['src'] if t['src'] else float('nan'):.2f}" if t else
             "alone: not a leaf module" if alone and r.module not in leaves else "alone: not timed")
        print(f"  {r.module or '(root)'} [{r.evidence}]: {r.source_us / steps:.1f} -> {r.target_us / steps:.1f} us "
              f"(x{r.ratio:.2f}); {a}")
    from reports.build import fix_where

    print("top 3 fixes:")
    for f in (d.extras.get("fixes") or [])[:3]:
        gain = f"saves up to {f['recoverable_us'] / steps:.0f} us/step" if f["kind"] == "perf" else "accuracy"
        print(f"  {f['title']}: {gain}, at {fix_where(f)}")
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="bert_small,gpt2_small,small_resnet,bert_wide,gpt2_wide,resnet_wide")
    ap.add_argument("--targets", default="xla,cpu:inductor,cpu:ort")
    ap.add_argument("--threads", type=int, default=1,
                    help="intra-op threads (1: on a shared machine OpenMP kernels otherwise wait for descheduled threads)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    with tempfile.TemporaryDirectory(prefix="porter-live-") as tmp:
        for model in a.models.split(","):
            for target in a.targets.split(","):
                check(model, target, Path(tmp) / f"{model}_{target.replace(':', '_')}")


if __name__ == "__main__":
    main()
