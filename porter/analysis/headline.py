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
from porter.stats import WIDE, RatioInterval, ab_ba_blocks, paired_ratio, unpaired_ratio

LIVE_BASIS = "unprofiled forwards, source and target timed alternately"
SINGLE_THREAD = "both stacks with one intra-op thread"
HEAP_KEPT = "freed memory kept by the process (PORTER_MALLOC=os: glibc's defaults)"
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
    iv = paired_ratio(*ab_ba_blocks(paired["source_s"], paired["target_s"]))
    clock = paired.get("clock") or "wall"
    other = paired.get("other_clock") or {}
    sides = {}
    for role, m, per_step in (("source", source_manifest, e2e.source), ("target", target_manifest, e2e.target)):
        unprofiled_s = _median(paired[f"{role}_s"])
        wall_s = unprofiled_s if clock == "wall" else _median(other.get(f"{role}_s"))
        profiled_s = _median((m.get("profiled_timing") or {}).get("samples_s"))  # wall time
        profiled_cpu_s = _median((m.get("stack_info") or {}).get("profiled_step_cpu_s"))
        # the profiled step on the headline's clock; wall for bundles captured before CPU time was kept
        on_clock_s = profiled_cpu_s if clock == "cpu" and not np.isnan(profiled_cpu_s) else profiled_s
        device_us = per_step.median
        sides[role] = {
            "unprofiled_step_s": unprofiled_s,
            "unprofiled_wall_s": wall_s,
            "profiled_step_s": profiled_s,
            "profiled_step_clock_s": on_clock_s,
            "profiler_overhead": profiled_s / wall_s if wall_s > 0 else None,
            "profiled_device_us_per_step": device_us,
            "profiled_steps": per_step.n,
            "step_scale": unprofiled_s / on_clock_s if on_clock_s > 0 else None,
        }
    advice = _advice(iv, True, paired.get("load_average"), int(paired.get("cpus") or 0))
    keep = ("source_s", "target_s", "source_first", "stopped", "elapsed_s", "load_average", "cpus", "threads",
            "heap", "clock", "other_clock")
    threads = paired.get("threads") or {}
    basis = LIVE_BASIS + (f"; {SINGLE_THREAD}: {threads.get('why')}" if threads.get("single") else "")
    basis += f"; {HEAP_KEPT}" if (paired.get("heap") or {}).get("kept") else ""
    if clock == "cpu":
        wall = paired_ratio(*ab_ba_blocks(other.get("source_s") or [], other.get("target_s") or []))
        basis += (f"; {CPU_CLOCK}" + (f" (wall time gives x{wall.ratio:.3f} [{wall.low:.3f}, {wall.high:.3f}])"
                                      if wall.low == wall.low else ""))
    return {"basis": basis, **iv.to_dict(), "advice": advice, "sides": sides,
            "pairs": {k: paired.get(k) for k in keep}}


def trace_headline(e2e: EndToEnd, busy: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Recorded traces: per-step device time (busy time where streams overlap), steps and spread per side."""
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
        iv = unpaired_ratio(per_step["source"], per_step["target"])
        basis = BUSY_BASIS
    elif e2e.basis == "per_step":
        iv = unpaired_ratio(e2e.source.samples, e2e.target.samples)
        basis = TRACE_BASIS
    else:
        iv = RatioInterval(e2e.ratio, float("nan"), float("nan"), 1, "whole trace")
        basis = WHOLE_BASIS
    return {"basis": basis, **iv.to_dict(), "advice": _advice(iv, live=False), "steps": steps}


def headline(e2e: EndToEnd, paired: Mapping[str, Any] | None, source_manifest: Mapping[str, Any],
             target_manifest: Mapping[str, Any], busy: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The diagnosis.json `headline` block (docs/diagnosis.md). busy: porter.analysis.busy.busy_block."""
    if paired and paired.get("source_s"):
        return live_headline(paired, e2e, source_manifest, target_manifest)
    return trace_headline(e2e, busy)


def scaled_to_step(groups: pd.DataFrame, block: Mapping[str, Any]) -> pd.DataFrame:
    """Each group's profiled time per step, times its side's step_scale (unprofiled step over
    profiled step, on the headline's clock): the profiler's slowdown taken out alike from every
    op of that side (us).

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
