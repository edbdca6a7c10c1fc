"""The diagnosis's `confirmed` block: its largest module gaps re-timed alone on both stacks
(porter.capture.confirm), and what the rest of the diagnosis takes from it.

Chosen: the N modules with the largest gap per unprofiled step (diagnosis.json by_module on a
live pair), the root excluded (it is the whole model); listed by their gap alone, largest loss
first (a fused kernel charged to a neighbour can hide the real loss in the profile, and the
alone timing brings it back to the top). Each keeps its profiled gap and interval
beside the confirmed one; a module whose confirmed interval holds zero is marked within noise
in by_module and in the groups of that module, so that the summary and the fix plan
(porter.analysis.fixrank) rank confirmed gaps only.
"""

from __future__ import annotations

import time
from typing import Any

import pandas as pd

from porter.pipeline.result import Diagnosis

Progress = Any


def suspects(by_module: pd.DataFrame, n: int) -> list[str]:
    """The n modules with the largest |gap| per unprofiled step (the profiled total where there
    is no per-step column), the root ('') left out."""
    if n <= 0 or by_module.empty:
        return []
    rows = by_module[by_module["key"] != ""]
    if "source_step_us" in rows.columns:
        gap = (rows["target_step_us"] - rows["source_step_us"]).abs()
    else:
        gap = rows["delta_us"].abs()
    return rows.assign(_g=gap.to_numpy()).sort_values("_g", ascending=False)["key"].head(n).astype(str).tolist()


def confirm_block(d: Diagnosis, model: Any, n: int, cpu_clock: bool, progress: Progress) -> dict[str, Any] | None:
    """Re-time the suspects alone when both stacks are here (a live pair run by this process)
    and the target runs the model as given (not a precision port); None otherwise."""
    if n <= 0 or model is None or not d.pair.here or d.target.manifest.get("precision"):
        return None
    from porter.capture.confirm import confirm

    paths = suspects(d.by_module, n)
    if not paths:
        return None
    stacks = [str((b.manifest.get("target") or {}).get("stack") or "") for b in (d.source, d.target)]
    progress(f"confirming the {len(paths)} largest module gaps: each module alone on both stacks")
    t0 = time.perf_counter()
    done = confirm(model.module, model.example_inputs, paths, stacks[0], stacks[1], cpu_clock=cpu_clock)
    profiled = d.by_module.set_index("key")
    rows = []
    for c in done:
        p = profiled.loc[c.module] if c.module in profiled.index else None
        rows.append({**c.to_dict(),
                     "profiled_gap_us": _step_gap(p), "profiled_low_us": _get(p, "gap_low_us"),
                     "profiled_high_us": _get(p, "gap_high_us"), "profiled_significant": bool(_get(p, "significant"))})
    # ranked by the gap alone, largest loss first, then wins, then what could not be replayed: the
    # profiled ranking chose them, the alone timing orders them
    rows.sort(key=lambda r: (bool(r["error"]), not r["significant"], -(r["gap_us"] if r["gap_us"] == r["gap_us"] else 0.0)))
    d.seconds["confirm"] = time.perf_counter() - t0
    return {"clock": "cpu" if cpu_clock else "wall", "stacks": stacks, "modules": rows,
            "method": "each module alone on both stacks with the arguments it got in one forward, every call, "
                      "interleaved, less each call's floor; median over repeats, 95% order-statistic interval"}


def apply_confirmed(d: Diagnosis, block: dict[str, Any]) -> None:
    """Modules confirmed within noise are within noise everywhere the diagnosis ranks."""
    quiet = {r["module"] for r in block["modules"] if not r["error"] and not r["significant"]}
    if not quiet:
        return
    for name in ("by_module", "groups"):
        t = getattr(d, name)
        key = "key" if name == "by_module" else "module"
        if "significant" in t.columns:
            hit = t[key].isin(quiet).to_numpy()
            setattr(d, name, t.assign(significant=t["significant"].to_numpy() & ~hit))


def _step_gap(p: Any) -> float | None:
    if p is None:
        return None
    if "source_step_us" in p.index:
        return float(p["target_step_us"] - p["source_step_us"])
    return float(p["delta_us"])


def _get(p: Any, col: str) -> Any:
    if p is None or col not in p.index:
        return None
    v = p[col]
    return None if v != v else (bool(v) if col == "significant" else float(v))
