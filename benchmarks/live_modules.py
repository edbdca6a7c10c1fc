"""Check a live diagnosis against an independent per-module timing (a script, not a test).

For each model x target: `porter diagnose MODEL --from cpu --to TARGET` (library models built
from configs with random weights, tests/models/library_models.py; `*_wide` are sizes where
compute outweighs a call's dispatch), 25 profiled steps. Then every leaf module is run alone on
both stacks (eager; torchax + jax.jit; torch.compile/inductor, a conv net's from channels-last inputs), each call it made in one forward
with the input it saw, interleaved, 30 repeats of the process's CPU time (a shared machine's
other work does not stretch it), less each call's floor (the cheapest call the stack can make with the same arguments:
a module inside the compiled program does not pay the guards and dispatch of a call alone).
The diagnosed gap of a module is the one diagnosis.json carries for a live pair: each side's
profiled time per step less the profiler's slowdown (porter.analysis.headline.scaled_to_step).
Agreement (agreement()): each side's top 3 by |gap| with the modules tied with its third
within the 95% intervals; three modules in both sets with the same sign agree.
Prints, per model x target: coverage, share split by estimate, host work left out of
coverage, the diagnosed top 3 gaps by leaf module beside their alone timing, both tied sets
and the agreement, the groups above 20x with their alone ratio, and the top 3 fixes.
One intra-op thread by default (a shared machine: OpenMP kernels wait for descheduled threads).

    .venv/bin/python -m benchmarks.live_modules [--models bert_small,...] [--targets xla,...] [--confirm all]

With --confirm, the diagnosis re-times its significant module gaps alone first, and a module is
significant only where that bears the profiled gap out; the check is then held twice: the
profiled gaps, and the gaps porter reports (the alone gap where confirmed).
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pandas as pd
import torch

LIBRARY = Path(__file__).resolve().parents[1] / "tests" / "models" / "library_models.py"
REPEATS = 30
STEPS = 25  # profiled steps: the 95% interval of a median of 25 runs from the 8th to the 18th (of 9: the 2nd to the 8th)
BIG_RATIO = 20.0


def leaf_inputs(module: torch.nn.Module, inputs: tuple[Any, ...],
                extra: tuple[str, ...] = ()) -> dict[str, list[tuple[Any, ...]]]:
    """Porter path -> positional inputs of every call of each leaf module in one forward (a
    resnet block calls its ReLU twice: alone, both calls are timed and added), and of the
    modules named in extra (a planted op in a module's own forward, beside its children)."""
    seen: dict[str, list[tuple[Any, ...]]] = {}
    hooks = []
    for name, mod in module.named_modules():
        if name and (not list(mod.children()) or name.replace(".", "/") in extra):
            path = name.replace(".", "/")
            hooks.append(mod.register_forward_pre_hook(
                lambda m, a, _p=path: seen.setdefault(_p, []).append(
                    tuple(x.detach().clone() if isinstance(x, torch.Tensor) else x for x in a))))
    with torch.no_grad():
        module(*inputs)
    for h in hooks:
        h.remove()
    return seen


def runner(stack: str, mod: torch.nn.Module, args: tuple[Any, ...], channels_last_inputs: bool = False) -> Callable[[], Any]:
    """One call of mod(*args) on the stack, finished before it returns; on inductor, from
    channels-last inputs when asked (channels_last())."""
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
        compiled = torch.compile(mod, backend="inductor")  # static shapes, recompile limit: alone_times
        if channels_last_inputs:
            args = channels_last(args)

        def call() -> Any:
            with torch.no_grad():
                return compiled(*args)
        return call

    def eager() -> Any:
        with torch.no_grad():
            return mod(*args)
    return eager


def channels_last(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """4-D tensors in channels-last order, as inductor lays out every activation of a graph with
    a convolution on the CPU (its layout optimisation is always on with oneDNN): a convolution
    compiled alone with the model's NCHW input pays the reorders that the model pays once."""
    return tuple(a.contiguous(memory_format=torch.channels_last) if isinstance(a, torch.Tensor) and a.dim() == 4
                 else a for a in args)


def samples_us(calls: dict[str, Callable[[], Any]], repeats: int) -> dict[str, list[float]]:
    """CPU time of the process for each callable per repeat, interleaved so load drifts hit all
    alike. CPU time, not wall: a descheduled process accrues none, so other work on a shared
    machine does not stretch it (an eager 512x2048 GEMM: wall quartiles 10.8/15.0/15.3 ms, CPU
    7.0/7.0/7.3 ms at load 4 on 2 cores), and each stack runs one op at a time on one thread here
    (torch.set_num_threads(1); XLA:CPU's Eigen and intra-op pools of one thread, porter.runtime.threads),
    so its CPU time is its work's time."""
    from porter.capture.confirm import interleaved_samples

    # as porter's confirm: settled calls, each side first in half the repeats
    return interleaved_samples(calls, repeats, time.process_time)


class _Floor(torch.nn.Module):
    """The cheapest call a stack can make with a module call's arguments (one add on one element
    of the first tensor): what that call pays alone whatever it computes. With the call's own
    arguments, not one element: a compiled call's cost grows with its inputs (dropout, the
    identity in eval, read +200-310 us on inductor against eager at 2x128x512 less a
    one-element floor)."""

    def forward(self, *args: Any) -> torch.Tensor:
        x = next(a for a in args if isinstance(a, torch.Tensor))
        return x[(0,) * x.dim()] + 1  # one element, read in place whatever the layout


@dataclass(frozen=True)
class Alone:
    """One leaf module run alone, every call it makes in one forward, less the per-call floors."""

    src: float  # us per forward, median over repeats
    tgt: float
    gap: float  # median over repeats of (target - source), same repeat
    ci: float  # half-width of the gap median's 95% interval (_notch: order statistics)


def _notch(xs: list[float]) -> float:
    """Half-width of the 95% interval of the median from order statistics (distribution-free, so
    a few stalled repeats do not widen it as an IQR does): the k-th smallest and k-th largest,
    k = floor((n - 1.96 sqrt(n)) / 2); with five samples that is the range."""
    v = sorted(xs)
    k = max(int((len(v) - 1.96 * math.sqrt(len(v))) / 2), 0)
    return (v[len(v) - 1 - k] - v[k]) / 2


def alone_times(stack: str, mods: dict[str, torch.nn.Module], leaves: dict[str, list[tuple[Any, ...]]],
                repeats: int = REPEATS) -> dict[str, Alone]:
    """Each leaf run alone on both stacks (every call of one forward), less each call's floor
    (_Floor with the same arguments, timed beside it): a module inside the compiled program
    does not pay the per-call guards, dispatch and argument handling that it pays alone. Each leaf
    in blocks of its own calls (porter.capture.confirm.BLOCK repeats, so that the other leaves do
    not decide its caches), every leaf's block in turn each round, not leaf after leaf: a slow
    minute of the machine falls on every module alike instead of on the few timed during it
    (bert_small's two identical intermediate dense layers read 343 and 162 us eager when timed one
    after the other beside another job). On inductor a conv net's leaves get channels-last inputs
    (channels_last()): resnet_wide's layer1 convolution alone took 5.4 ms compiled from the
    model's NCHW input and 3.5 ms from channels-last, against 6.0 ms eager."""
    import torch._dynamo.config as dynamo_config

    fns: dict[str, Callable[[], Any]] = {}
    counts: dict[str, int] = {}
    # the model's layout inside inductor's compiled graph
    cl = stack == "inductor" and any(isinstance(m, torch.nn.Conv2d) for m in mods.values())
    # every leaf's compiled forward stays alive at once: nn.Linear.forward shared by every dense
    # layer would otherwise hit dynamo's recompile limit and run eager, or be recompiled with
    # dynamic shapes (another program than the model's)
    with dynamo_config.patch(recompile_limit=1024, accumulated_recompile_limit=8192, automatic_dynamic_shapes=False):
        for path, calls in leaves.items():
            try:
                mine = {f"{path}|{kind}{side}{i}": runner("eager" if side == "src" else stack,
                                                          mods[path] if kind == "" else _Floor(), args, cl)
                        for i, args in enumerate(calls) for side in ("src", "tgt") for kind in ("", "floor")}
                for c in mine.values():
                    c()
            except Exception as exc:  # a module that does not run alone: said, not hidden
                print(f"  {path}: not run alone ({type(exc).__name__}: {str(exc)[:80]})")
                continue
            fns.update(mine)
            counts[path] = len(calls)
        t = samples_us(fns, repeats)
    out = {}
    for path, n in counts.items():
        per = {side: [max(sum(t[f"{path}|{side}{i}"][r] - t[f"{path}|floor{side}{i}"][r] for i in range(n)), 0.0)
                      for r in range(repeats)] for side in ("src", "tgt")}
        gaps = [b - a for a, b in zip(per["src"], per["tgt"])]
        out[path] = Alone(statistics.median(per["src"]), statistics.median(per["tgt"]), statistics.median(gaps), _notch(gaps))
    return out


def top3(gaps: dict[str, float]) -> list[str]:
    return sorted(gaps, key=lambda k: -abs(gaps[k]))[:3]


def tied_top(gaps: dict[str, float], ci: dict[str, float]) -> set[str]:
    """The top 3 by |gap| and every module tied with the third within the two intervals
    (|gap| + ci >= |third| - ci(third)): ties are not ordered by chance."""
    ranked = top3(gaps)
    if not ranked:
        return set()
    bar = abs(gaps[ranked[-1]]) - ci.get(ranked[-1], 0.0)
    return {k for k, g in gaps.items() if abs(g) + ci.get(k, 0.0) >= bar}


@dataclass(frozen=True)
class Agreement:
    agree: int  # of 3: diagnosed top modules (ties allowed) in the alone top (ties allowed), same sign
    strict: int  # of 3: the diagnosed top 3 in the alone top 3 with the same sign, no tolerance
    diagnosed_top: list[str]  # the tied sets, largest |gap| first
    alone_top: list[str]


def agreement(diagnosed: dict[str, float], diagnosed_ci: dict[str, float], alone: dict[str, Alone]) -> Agreement:
    """The rule: each side's top 3 leaf modules by |gap| with every module tied with its third
    within the 95% intervals (diagnosed: the per-step gaps' notch; alone: the repeats' notch).
    Agreement counts the modules in both tied sets whose gap has the same sign on both, at most 3:
    a diagnosed top 3 that can be chosen among its ties to match the alone timing. Tied sets
    larger than 3 are reported, since a set of everything would agree with anything."""
    a_gap = {k: v.gap for k, v in alone.items()}
    dt = tied_top({k: v for k, v in diagnosed.items() if k in alone}, diagnosed_ci)
    at = tied_top(a_gap, {k: v.ci for k, v in alone.items()})
    same_sign = lambda ks: [k for k in ks if (a_gap[k] > 0) == (diagnosed[k] > 0)]  # noqa: E731
    both = same_sign(dt & at)
    strict = same_sign(set(top3({k: v for k, v in diagnosed.items() if k in alone})) & set(top3(a_gap)))
    order = lambda xs, g: sorted(xs, key=lambda k: -abs(g[k]))  # noqa: E731
    return Agreement(min(len(both), 3), len(strict), order(dt, diagnosed), order(at, a_gap))


WITHIN = 1.5  # issue 24's bar: a significant diagnosed gap within 1.5x of the module timed alone


@dataclass(frozen=True)
class Held:
    """The diagnosis' significant module gaps held against the alone timing."""

    significant: list[str]  # leaf modules whose diagnosed gap's interval excludes zero
    within: list[str]  # of those: same sign as alone and within WITHIN x of its size
    off: list[str]  # of those: beyond WITHIN x, or the other sign
    phantom: list[str]  # of those: the alone gap's interval holds zero (alone finds no gap)


def held(diagnosed: dict[str, float], significant: set[str], alone: dict[str, Alone]) -> Held:
    sig = [k for k in sorted(significant, key=lambda k: -abs(diagnosed.get(k, 0.0))) if k in alone and k in diagnosed]
    phantom = [k for k in sig if abs(alone[k].gap) <= alone[k].ci]
    ok = [k for k in sig if k not in phantom and (alone[k].gap > 0) == (diagnosed[k] > 0)
          and 1 / WITHIN <= abs(diagnosed[k]) / abs(alone[k].gap) <= WITHIN]
    return Held(sig, ok, [k for k in sig if k not in ok and k not in phantom], phantom)


def diagnosed_noise(d: Any, keys: Any) -> dict[str, float]:
    """Leaf module -> half-width of the 95% interval of its diagnosed gap: the notch of the gaps of
    the profiled steps (step k of one side against step k of the other), each side scaled as the
    diagnosed gap is."""
    from porter.analysis.optime import op_times

    al = d.alignment
    sides = (d.extras.get("headline") or {}).get("sides") or {}
    out: dict[str, list[float]] = {}
    per: dict[str, Any] = {}
    for role, ops in (("source", al.source_ops), ("target", al.target_ops)):
        raw = op_times(ops).values.reindex(ops["op_id"].to_numpy()).fillna(0.0).to_numpy()
        f = pd.DataFrame({"module": ops["module"].to_numpy(), "step": ops["step"].to_numpy(), "t": raw})
        f = f[(f["step"] >= 0) & f["module"].isin(keys)]
        steps = sorted(f["step"].unique())
        scale = (sides.get(role) or {}).get("step_scale") or 1.0
        tab = f.pivot_table(index="module", columns="step", values="t", aggfunc="sum").reindex(columns=steps).fillna(0.0)
        per[role] = tab.to_numpy() * scale, list(tab.index)
    s, s_keys = per["source"]
    t, t_keys = per["target"]
    n = min(s.shape[1], t.shape[1])
    for k in keys:
        if k in s_keys and k in t_keys and n >= 2:
            out[k] = list(t[t_keys.index(k), :n] - s[s_keys.index(k), :n])
    return {k: _notch(v) if len(v) >= 2 else 0.0 for k, v in out.items()}


def diagnosed_gaps(d: Any, leaves: Any) -> dict[str, float]:
    """Leaf module -> its gap in the unprofiled step (us, target - source), as diagnosis.json's
    by_module carries it (each side's profiled time per step less its profiler slowdown:
    porter.analysis.headline.scaled_to_step), the profiled gap per step where there is no
    unprofiled step."""
    rows = step_scaled(d, d.by_module[d.by_module["key"].isin(leaves)].set_index("key"))
    if "source_step_us" in rows.columns:
        return (rows["target_step_us"] - rows["source_step_us"]).to_dict()
    return (rows["delta_us"] / max(d.e2e.source.n, 1)).to_dict()


def step_scaled(d: Any, rows: Any) -> Any:
    """rows with source_step_us / target_step_us as diagnosis.json writes them (live pairs)."""
    from porter.analysis.headline import scaled_to_step

    return scaled_to_step(rows, d.extras.get("headline") or {})


def reported_gaps(d: Any, diagnosed: dict[str, float]) -> dict[str, float]:
    """Leaf module -> the gap porter reports for it: its gap alone where the diagnosis re-timed
    it and the alone timing bore the profiled gap out (by_module's evidence 'confirmed alone'),
    else the diagnosed (profiled) gap."""
    bm = d.by_module.set_index("key")
    if "evidence" not in bm.columns:
        return dict(diagnosed)
    return {k: float(bm.at[k, "alone_gap_us"]) if bm.at[k, "evidence"] == "confirmed alone" else g
            for k, g in diagnosed.items()}


def check(model: str, target: str, out: Path, extra: tuple[str, ...] = (), confirm: int = 0,
          repeats: int = REPEATS) -> dict[str, Any]:
    """One model x target: the diagnosis (its module gaps re-timed alone by porter as
    `--confirm` asks: porter.pipeline.confirmation), then its leaf modules (and extra) timed
    alone here, independently. Returns the figures. model: a library model's name, or FILE:FACTORY."""
    from porter.capture.models import load_model
    from porter.capture.options import CaptureOptions
    from porter.pipeline.diagnose import diagnose_specs

    ref = model if ":" in model else f"{LIBRARY}:{model}"
    t0 = time.perf_counter()
    d, _ = diagnose_specs("cpu", target, out, model=ref, report=False, confirm=confirm,
                          capture_options=CaptureOptions(steps=STEPS, warmup=1, repeats=5, activations=False))
    print(f"\n(diagnosis {time.perf_counter() - t0:.0f} s, of which confirm {d.seconds.get('confirm', 0):.0f} s)")
    stats = d.alignment.stats
    cov = d.coverage()
    steps = max(d.e2e.source.n, 1)
    print(f"\n== {model}: cpu -> {target}")
    print(f"coverage: source {cov['source'] * 100:.2f}%, target {cov['target'] * 100:.2f}%; split by estimate: "
          f"source {stats.get('source_split_by_estimate_share', 0) * 100:.1f}%, "
          f"target {stats.get('target_split_by_estimate_share', 0) * 100:.1f}%; the runtime's work outside every module, "
          f"unpaired (in coverage's denominator): target {stats.get('target_unmatched_outside_modules_share', 0) * 100:.1f}% "
          f"({stats.get('target_unmatched_outside_modules_us', 0) / steps:.1f} us/step), other unmatched "
          f"{stats.get('target_unmatched_other_share', 0) * 100:.1f}%")
    spec = load_model(ref)
    leaves = leaf_inputs(spec.module, spec.example_inputs, extra)
    mods = dict((n.replace(".", "/"), m) for n, m in spec.module.named_modules())
    stack = target.split(":")[-1]
    rows = step_scaled(d, d.by_module[d.by_module["key"].isin(leaves)].set_index("key"))
    # beside the profiled time per step, the diagnosis' step-scaled figure: each module's profiled
    # time per step times its side's unprofiled / profiled step (on the headline's clock), as
    # diagnosis.json's groups carry it (porter.analysis.headline)
    steps_rows = rows.assign(profiled_src=rows["source_us"] / steps, profiled_tgt=rows["target_us"] / steps)
    diag_gap = diagnosed_gaps(d, leaves)
    big = d.groups[(d.groups["ratio"] > BIG_RATIO) | (d.groups["ratio"] < 1 / BIG_RATIO)]
    alone = alone_times(stack, mods, leaves, repeats) if stack in ("xla", "inductor") else {}
    result: dict[str, Any] = {"coverage": cov, "big": len(big), "diagnosed": diag_gap, "alone": alone}
    print("top 3 gaps by leaf module, diagnosed (each side's profiled time per step less its profiler slowdown; profiled "
          f"per step in brackets) beside alone (every call of one forward, median of {repeats} interleaved, less "
          "the floor per call; +- the gap median's 95% notch):")
    for key in top3(diag_gap):
        r = steps_rows.loc[key]
        t = alone.get(key)
        a = f"alone {t.src:.1f} -> {t.tgt:.1f} us, gap {t.gap:+.1f} +- {t.ci:.1f}" if t else "alone: not timed"
        src_step = r.get("source_step_us", float("nan"))
        tgt_step = r.get("target_step_us", float("nan"))
        print(f"  {key}: {src_step:.1f} -> {tgt_step:.1f} us, gap {diag_gap[key]:+.1f} (profiled "
              f"{r.profiled_src:.1f} -> {r.profiled_tgt:.1f}, x{r.ratio:.2f}); {a}")
    if alone:
        noise = diagnosed_noise(d, list(leaves))
        ag = agreement(diag_gap, noise, alone)
        print("tied top, diagnosed: " + ", ".join(f"{k} ({diag_gap[k]:+.1f} +- {noise.get(k, 0):.1f} us)" for k in ag.diagnosed_top))
        print("tied top, alone:     " + ", ".join(f"{k} ({alone[k].gap:+.1f} +- {alone[k].ci:.1f} us)" for k in ag.alone_top))
        print(f"agreement: {ag.agree}/3 (top 3 with ties within the 95% intervals, same sign); strict (no tolerance): {ag.strict}/3")
        result.update(agree=ag.agree, strict=ag.strict, agreement=ag)
        sig = set(d.by_module.loc[d.by_module["significant"].astype(bool), "key"]) if "significant" in d.by_module else set()
        profiled_sig = {r["module"] for r in (d.confirmed or {}).get("modules", []) if r["profiled_significant"]} | sig
        before = held(diag_gap, profiled_sig, alone)
        print(f"profiled (before porter's confirmation): significant module gaps within {WITHIN:g}x of alone "
              f"(same sign): {len(before.within)}/{len(before.significant)}; where alone finds none: {len(before.phantom)}")
        shown = reported_gaps(d, diag_gap)
        h = held(shown, sig, alone)
        result.update(held=h, held_profiled=before)
        print(f"reported (after it): significant module gaps within {WITHIN:g}x of alone (same sign): "
              f"{len(h.within)}/{len(h.significant)}; where alone finds none: {len(h.phantom)}")
        ev = d.by_module.set_index("key")["evidence"] if "evidence" in d.by_module else {}
        dropped = [k for k in before.significant if k not in sig]
        found = [k for k in dropped if k not in before.phantom]
        result.update(dropped=dropped, dropped_with_gap_alone=found)
        print(f"dropped by porter's confirmation: {len(dropped)}, of which this alone timing finds a gap for "
              f"{len(found)}")
        for k in dropped:
            print(f"  {ev.get(k, 'profiled')}: {k} profiled {diag_gap[k]:+.1f}, porter alone "
                  f"{d.by_module.set_index('key').at[k, 'alone_gap_us']:+.1f}, alone here {alone[k].gap:+.1f} "
                  f"+- {alone[k].ci:.1f} us")
        for k in h.significant:
            verdict = "no gap alone" if k in h.phantom else "within" if k in h.within else "off"
            ratio = shown[k] / alone[k].gap if alone[k].gap else float("nan")
            bk = d.by_module.set_index("key")
            lo, hi = (bk.at[k, c] if c in bk.columns else float("nan") for c in ("alone_low_us", "alone_high_us"))
            print(f"  {verdict}: {k} reported {shown[k]:+.1f} [{lo:+.1f}, {hi:+.1f}] ({ev.get(k, 'profiled')}; "
                  f"profiled {diag_gap[k]:+.1f}), alone {alone[k].gap:+.1f} +- {alone[k].ci:.1f} us (x{ratio:.2f})")
    print(f"groups beyond {BIG_RATIO:g}x either way: {len(big)}")
    for r in big.itertuples():
        t = alone.get(r.module)
        a = (f"alone x{t.tgt / t.src if t.src else float('nan'):.2f}" if t else
             "alone: not a leaf module" if alone and r.module not in leaves else "alone: not timed")
        print(f"  {r.module or '(root)'} [{r.evidence}]: {r.source_us / steps:.1f} -> {r.target_us / steps:.1f} us "
              f"(x{r.ratio:.2f}); {a}")
    from reports.findings import fix_where

    print("top 3 fixes:")
    for f in (d.extras.get("fixes") or [])[:3]:
        gain = f"saves up to {f['recoverable_us'] / steps:.0f} us/step" if f["kind"] == "perf" else "accuracy"
        print(f"  {f['title']}: {gain}, at {fix_where(f)}")
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="bert_small,gpt2_small,small_resnet,bert_wide,gpt2_wide,resnet_wide,gpt2_wide3,"
                                        "bert_wide3,bert_wide3_newgelu")
    ap.add_argument("--targets", default="xla,cpu:inductor,cpu:ort")
    ap.add_argument("--threads", type=int, default=1,
                    help="intra-op threads (1: on a shared machine OpenMP kernels otherwise wait for descheduled threads)")
    ap.add_argument("--modules", default="", help="non-leaf module paths to time alone too (a, b/c): a planted op "
                    "in a module's own forward")
    ap.add_argument("--confirm", default="0", help="porter diagnose's --confirm: N or all (0: the profiled gaps alone)")
    ap.add_argument("--repeats", type=int, default=REPEATS,
                    help="interleaved repeats of this script's own alone timing (porter's: PORTER_CONFIRM_REPEATS)")
    a = ap.parse_args()
    from porter.pipeline.confirmation import parse_confirm

    confirm = parse_confirm(a.confirm)
    extra = tuple(m for m in a.modules.split(",") if m)
    torch.set_num_threads(a.threads)
    with tempfile.TemporaryDirectory(prefix="porter-live-") as tmp:
        for model in a.models.split(","):
            for target in a.targets.split(","):
                name = model.rpartition(":")[2]
                check(model, target, Path(tmp) / f"{name}_{target.replace(':', '_')}", extra, confirm, a.repeats)


if __name__ == "__main__":
    main()
