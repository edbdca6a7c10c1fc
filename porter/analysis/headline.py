"""The one number a review reads first: target/source time, its 95% interval, and its basis.

Live pairs: the ratio comes from unprofiled forwards timed alternately in one process
(porter.capture.interleaved), never from the profiled steps, whose profiler overhead
differs by stack; each side's profiler overhead (profiled step wall time over the
unprofiled one) is reported, and the profiled run only says *where* the time goes: its
per-group times per step are scaled by the profiler's slowdown (scaled_to_step). Recorded
traces: per-step device time of the profiled steps, with the step counts and spreads behind it.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pandas as pd

from porter.analysis.attribute import EndToEnd
from porter.core.stats import (WIDE, RatioInterval, ab_ba_blocks, between_run_sd, few_sample_ratio, paired_ratio,
                               unpaired_ratio, with_between_run)

LIVE_BASIS = "unprofiled forwards, source and target timed alternately"
SINGLE_THREAD = "both stacks with one intra-op thread"
HEAP_KEPT = "freed memory kept by the process, its heap touched up front (PORTER_MALLOC=os: glibc's defaults)"
CPU_CLOCK = ("process CPU time per forward (both on the CPU, one thread: time the scheduler gave other "
             "processes is not counted)")
TRACE_BASIS = "device time per profiled step"
WHOLE_BASIS = "device time of the whole trace (a side has no step markers)"
BUSY_BASIS = "device busy time per profiled step (streams overlap: the union of kernel intervals, not their sum)"


def _advice(iv: RatioInterval, live: bool, load: float | None = None, cpus: int = 0) -> str | None:
    if not iv.wide:
        return None
    if live:
        busy = (f" (the machine was oversubscribed: load average {load:.1f} on {cpus} CPUs, which slows "
                "the stacks by different amounts)" if load is not None and cpus and load > cpus else "")
        return (f"the 95% interval is wider than +-{WIDE:.0%}{busy}: rerun on a quieter machine (stop other "
                "CPU-heavy work) or give the timing longer (PORTER_TIMING_BUDGET_S=60)")
    return (f"the 95% interval is wider than +-{WIDE:.0%} (or there are too few steps for one): "
            "record more profiled steps per side")


def _median(xs: Any) -> float:
    xs = [float(x) for x in xs or ()]
    return float(np.median(xs)) if xs else float("nan")


def live_headline(paired: Mapping[str, Any], e2e: EndToEnd, source_manifest: Mapping[str, Any],
                  target_manifest: Mapping[str, Any]) -> dict[str, Any]:
    """paired: porter.capture.interleaved.PairedTiming.to_dict(); manifests give the profiled step times."""
    sd = between_run_sd(paired.get("load_average"), int(paired.get("cpus") or 0))
    iv = with_between_run(paired_ratio(*ab_ba_blocks(paired["source_s"], paired["target_s"])), sd)
    clock = paired.get("clock") or "wall"
    other = paired.get("other_clock") or {}
    sides = {}
    for role, m, per_step in (("source", source_manifest, e2e.source), ("target", target_manifest, e2e.target)):
        unprofiled = [float(x) for x in paired[f"{role}_s"] or ()]
        unprofiled_s = _median(unprofiled)
        wall_s = unprofiled_s if clock == "wall" else _median(other.get(f"{role}_s"))
        profiled_wall = (m.get("profiled_timing") or {}).get("samples_s") or []
        profiled_cpu = (m.get("stack_info") or {}).get("profiled_step_cpu_s") or []
        profiled_s = _median(profiled_wall)  # wall time
        # the profiled steps on the headline's clock; wall for bundles captured before CPU time was kept
        on_clock = profiled_cpu if clock == "cpu" and profiled_cpu else profiled_wall
        on_clock_s = _median(on_clock)
        slowdown = unpaired_ratio(unprofiled, on_clock)
        device_us = per_step.median
        sides[role] = {
            "unprofiled_step_s": unprofiled_s,
            "unprofiled_wall_s": wall_s,
            "profiled_step_s": profiled_s,
            "profiled_step_clock_s": on_clock_s,
            "profiler_overhead": profiled_s / wall_s if wall_s > 0 else None,
            "profiled_device_us_per_step": device_us,
            "profiled_steps": per_step.n,
            "profiler_slowdown": slowdown.to_dict(),
            "step_scale": step_scale(slowdown),
            "step_scale_ci95": list(step_scale_bounds(slowdown)),
        }
    advice = _advice(iv, True, paired.get("load_average"), int(paired.get("cpus") or 0))
    keep = ("source_s", "target_s", "source_first", "stopped", "elapsed_s", "load_average", "cpus", "threads",
            "heap", "measurement", "clock", "other_clock")
    threads = paired.get("threads") or {}
    basis = LIVE_BASIS + (f"; {SINGLE_THREAD}: {threads.get('why')}" if threads.get("single") else "")
    basis += f"; {HEAP_KEPT}" if (paired.get("heap") or {}).get("kept") else ""
    if clock == "cpu":
        wall = paired_ratio(*ab_ba_blocks(other.get("source_s") or [], other.get("target_s") or []))
        basis += (f"; {CPU_CLOCK}" + (f" (wall time gives x{wall.ratio:.3f} [{wall.low:.3f}, {wall.high:.3f}])"
                                      if wall.low == wall.low else ""))
    if (paired.get("measurement") or {}).get("oversubscribed"):
        basis += f"; {paired['measurement']['oversubscription']}"
    return {"basis": basis, **iv.to_dict(), "advice": advice, "sides": sides,
            "pairs": {k: paired.get(k) for k in keep}}


def noisy_captures(source_manifest: Mapping[str, Any], target_manifest: Mapping[str, Any]) -> list[str]:
    """The sides whose own capture said its timing was noisy (porter capture's IQR/median check):
    a ratio of their profiled steps is no firmer than the captures were."""
    out = []
    for role, m in (("source", source_manifest), ("target", target_manifest)):
        for key in ("timing", "profiled_timing"):
            t = m.get(key) or {}
            if t.get("noisy"):
                out.append(f"{role} ({key.replace('_', ' ')}: IQR/median {100 * float(t.get('spread') or 0):.0f}%)")
                break
    return out


def trace_headline(e2e: EndToEnd, busy: Mapping[str, Any] | None = None,
                   noisy: list[str] | None = None) -> dict[str, Any]:
    """Recorded traces: per-step device time (busy time where streams overlap), steps and spread
    per side. Fewer than stats.SMALL_N steps a side get order-statistic intervals; noisy: the
    sides whose capture said they were noisy (noisy_captures), which make the headline uncertain."""
    per_step = {"source": e2e.source.samples, "target": e2e.target.samples}
    busy_steps = {r: list((busy or {}).get(r, {}).get("per_step_busy_us") or []) for r in ("source", "target")}
    use_busy = bool(busy and busy.get("streams_overlap") and all(busy_steps.values()))
    if use_busy:
        per_step = busy_steps
    steps = {}
    for role, xs in per_step.items():
        med = float(np.median(xs)) if len(xs) else float("nan")
        iqr = float(np.subtract(*np.percentile(xs, [75, 25]))) if len(xs) else float("nan")
        steps[role] = {"n": len(xs), "median_us": med, "rel_spread": iqr / med if med else float("nan")}
    if use_busy:
        iv = few_sample_ratio(per_step["source"], per_step["target"])
        basis = BUSY_BASIS
    elif e2e.basis == "per_step":
        iv = few_sample_ratio(e2e.source.samples, e2e.target.samples)
        basis = TRACE_BASIS
    else:
        iv = RatioInterval(e2e.ratio, float("nan"), float("nan"), 1, "whole trace")
        basis = WHOLE_BASIS
    advice = _advice(iv, live=False)
    out = {"basis": basis, **iv.to_dict(), "advice": advice, "steps": steps}
    if noisy:
        out["wide"] = True  # uncertain in every view: the views read `wide` and `advice`
        out["noisy_captures"] = noisy
        out["advice"] = (f"{' and '.join(noisy)} said {'its' if len(noisy) == 1 else 'their'} timing was noisy when "
                         "captured: recapture on a quieter machine" + (f"; also {advice}" if advice else ""))
    return out


def headline(e2e: EndToEnd, paired: Mapping[str, Any] | None, source_manifest: Mapping[str, Any],
             target_manifest: Mapping[str, Any], busy: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The diagnosis.json `headline` block (docs/diagnosis.md). busy: porter.analysis.busy.busy_block."""
    if paired and paired.get("source_s"):
        return live_headline(paired, e2e, source_manifest, target_manifest)
    return trace_headline(e2e, busy, noisy_captures(source_manifest, target_manifest))


def step_scale(slowdown: RatioInterval) -> float:
    """The factor that takes the profiler's slowdown (profiled step over unprofiled, on the
    headline's clock) out of a side's groups: 1 / slowdown where the profiled steps are slower
    beyond the 95% interval, else 1.

    Within the interval the ratio of two medians is noise, and a noise factor moves every group
    of one side alike: on a busy CI run XLA's profiled step read 17% slower than its unprofiled
    one (XLA:CPU traces its thunks in well under a microsecond each), which made milliseconds of
    gap out of BERT's dense layers that a timing of each module alone did not show. Profiled
    steps faster than the unprofiled ones are not a profiler's doing: the unprofiled forwards
    alternate with the other stack's, which leaves the caches cold for each (bert_wide eager:
    profiled 15% faster; scaled up, its output dense layer read 770 us slower than XLA's where
    its profiled time and a timing alone both gave +110 us). Under 3 profiled steps there is no
    interval: the slowdown as measured."""
    r = slowdown.ratio
    if not (np.isfinite(r) and r > 1.0):
        return 1.0
    if np.isfinite(slowdown.low) and slowdown.low <= 1.0:
        return 1.0
    return 1.0 / r


def step_scale_bounds(slowdown: RatioInterval) -> tuple[float, float]:
    """The 95% interval of step_scale: 1 / the slowdown's interval where the scale applies, else
    (1, 1). A gap between two sides' scaled times is no firmer than their scales: the same stack
    against itself once read a target profiled 2.05x [1.88, 2.20] slower and a source 1.50x
    [1.42, 1.58], and the one point scale per side made ten of 27 modules 5-12% faster on the
    target, each beyond its steps' noise (porter.analysis.gap_noise widens by these bounds)."""
    scale = step_scale(slowdown)
    if scale == 1.0 or not (np.isfinite(slowdown.low) and np.isfinite(slowdown.high)):
        return scale, scale
    return 1.0 / slowdown.high, 1.0 / slowdown.low


def scaled_to_step(groups: pd.DataFrame, block: Mapping[str, Any]) -> pd.DataFrame:
    """Each group's profiled time per step, times its side's step_scale (step_scale(): the
    profiler's measured slowdown taken out alike from every op of that side) (us).

    Not the group's share of the unprofiled step: that spread each side's time between ops (an
    eager model's Python, 8-10% of a BERT step) over its ops in proportion, so the same GEMM
    on both sides read 5-10% slower on the side with more Python (bert_wide dense layers read
    inductor 700 us faster per step, alone it is 300 us slower). Time between ops stays out of
    every group: the groups of a side add up to less than its step.
    Adds source_step_us / target_step_us on the live path; returns groups unchanged otherwise.
    """
    sides = block.get("sides")
    if not sides:
        return groups
    out = groups.copy()
    for role in ("source", "target"):
        side = sides[role]
        out[f"{role}_step_us"] = out[f"{role}_us"] / max(side["profiled_steps"], 1) * (side["step_scale"] or np.nan)
    return out


def ops_step(by_module: pd.DataFrame, block: Mapping[str, Any]) -> dict[str, Any] | None:
    """What the step table counts against what the headline counts (live pairs): each side's
    ops per unprofiled step (the modules' source_step_us / target_step_us summed: the
    profiler's slowdown out) beside its unprofiled step, and their ratio.

    The groups hold op time only; the headline's forwards also hold the time between ops (an
    eager model's Python and dispatch, a compiled program's runtime). Where the ops' ratio falls
    outside the headline's interval, ``why`` says how much of each step lies between ops, so
    that the per-step line never contradicts the headline without a word."""
    sides = block.get("sides") or {}
    if not sides or "source_step_us" not in by_module.columns or by_module.empty:
        return None
    ops = {r: float(by_module[f"{r}_step_us"].sum()) for r in ("source", "target")}
    step = {r: float((sides.get(r) or {}).get("unprofiled_step_s") or np.nan) * 1e6 for r in ("source", "target")}
    ratio = ops["target"] / ops["source"] if ops["source"] > 0 else None
    lo, hi = block.get("ci95") or (None, None)
    agrees = ratio is None or lo is None or hi is None or lo <= ratio <= hi
    between = {r: step[r] - ops[r] for r in ops}
    why = None
    if not agrees:
        parts = [f"{r} {between[r]:.0f} us of {step[r]:.0f} us ({between[r] / step[r]:.0%})"
                 for r in ("source", "target") if np.isfinite(step[r]) and step[r] > 0]
        why = ("the headline counts the time between ops, the step table only ops; per unprofiled step, "
               "between ops: " + ", ".join(parts)) if all(between[r] >= 0 for r in between) else (
            "the ops, less the profiler's slowdown, add up to more than the unprofiled step: the step "
            "table is uncertain (descheduled profiled steps, or a slowdown the interval did not resolve)")
    return {"source_ops_us": ops["source"], "target_ops_us": ops["target"], "ratio": ratio,
            "source_step_us": step["source"], "target_step_us": step["target"],
            "source_between_us": between["source"], "target_between_us": between["target"],
            "agrees_with_headline": bool(agrees), "why": why}
