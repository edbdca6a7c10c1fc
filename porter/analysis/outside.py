"""Time outside every module on a live pair, named by what it is.

On a live pair every op the model ran carries the module porter tagged it with (the root's own
work is module ''). What no module ran is the stack's runtime: torch.compile's guard checks,
the compiled graph's wrapper with the allocations and dispatch it does, and transfers between
host and device. Only that is "outside every module"; an op at the root that the other side has
nothing like is the model's own unmatched work and is counted as such, not excused as runtime.
Both count in coverage's denominator (porter.analysis.align.Alignment.coverage), so the coverage
line, the outside share and the rest add up to each side's whole time.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

import numpy as np
import pandas as pd

from porter.analysis.compiled import CACHE_LOOKUP

GUARDS = "guard checks"
WRAPPER = "graph wrapper and runtime dispatch"
TRANSFERS = "transfers"
KINDS = (GUARDS, WRAPPER, TRANSFERS)
# what a fix plan names each kind's time by (porter.analysis.fixplan.outside_fix_groups)
KIND_OPS = {GUARDS: "TorchDynamo Cache Lookup", WRAPPER: "compiled graph wrapper and dispatch",
            TRANSFERS: "host-device transfers"}

# host ranges torch.compile's runtime opens around a compiled graph: no eager counterpart
RUNTIME_RANGES = ("TorchDynamo Cache Lookup", "Torch-Compiled Region", "## Call CompiledFxGraph",
                  "Pregraph bytecode", "AOTDispatcher Runtime Wrapper")
_TRANSFER = re.compile(r"memcpy|Memcpy|copyBuffer|CopyHostToDevice|CopyDeviceToHost|TransferToDevice|"
                       r"TransferFromDevice|^copy-start|^copy-done|^(send|recv)(-done)?(\.\d+)?$|infeed|outfeed")


def is_runtime_range(name: str) -> bool:
    return name.startswith(RUNTIME_RANGES)


def outside_kind(name: str, in_region: bool) -> str:
    """What an op at module '' is when it is the runtime's (KINDS), '' when it is the model's."""
    if CACHE_LOOKUP.match(name):
        return GUARDS
    if in_region or is_runtime_range(name):
        return WRAPPER  # inside a compiled region: the wrapper's own allocations and dispatch
    if _TRANSFER.search(name):
        return TRANSFERS
    return ""


def outside_times(frame: pd.DataFrame, unmatched: np.ndarray) -> dict[str, float]:
    """Time per kind of the unmatched units at module '' that are the runtime's (a unit frame:
    porter.analysis.groups.unit_frame), kinds with time only."""
    rows = np.flatnonzero(unmatched & (frame["module"].to_numpy() == ""))
    out: dict[str, float] = {}
    fw, region, time = frame["fw"].to_numpy(), frame["region"].to_numpy(), frame["time"].to_numpy()
    for r in rows.tolist():
        kind = outside_kind(str(fw[r]), bool(region[r] >= 0))
        if kind:
            out[kind] = out.get(kind, 0.0) + float(time[r])
    return out


ROOT_MODEL_SHARE = 0.1  # the root's row is the runtime's when the model's own ops there are under this share of it


def runtime_step(stats: Mapping[str, Any], sides: Mapping[str, Any], counted: Mapping[str, Any] | None,
                 root: Mapping[str, float]) -> dict[str, Any] | None:
    """Each side's runtime per unprofiled step, compared like for like (live pairs).

    The compiled target's wrapper and guard checks have no row on an eager source, whose own
    runtime (Python and dispatch between ops: 56% of a Llama step on this machine) lies between
    its ops, where no group counts it. Ranked against nothing, the wrapper read as the largest
    "loss" (+1.56 ms per step on planted Llama -> inductor, above the planted module's +1.04 ms)
    beside a target 14% faster. Here each side's runtime is its kinds outside every module
    (counted per profiled step, times its step scale) plus its time between ops (`counted`:
    porter.analysis.headline.ops_step). root: each side's root-row time per unprofiled step; the
    row is the runtime's (``root_is_runtime``) when the model's own ops in it, on either side, are
    a small share of the larger side's row (stock Llama's 5 us of slicing at the root beside
    the compiled target's 939 us of wrapper and guards)."""
    if not sides or not counted:
        return None
    out: dict[str, Any] = {}
    for role in ("source", "target"):
        side = sides.get(role) or {}
        per = (side.get("step_scale") or float("nan")) / max(int(side.get("profiled_steps") or 1), 1)
        kinds = {k: float(v) * per for k, v in (stats.get(f"{role}_outside_modules_by_kind_us") or {}).items() if v}
        between = max(float(counted.get(f"{role}_between_us") or 0.0), 0.0)
        out[role] = {"kinds_us": kinds, "between_us": between, "total_us": sum(kinds.values()) + between,
                     "root_us": float(root.get(role) or 0.0)}
    s, t = out["source"]["total_us"], out["target"]["total_us"]
    if not (np.isfinite(s) and np.isfinite(t)):
        return None
    own = [out[r]["root_us"] - sum(out[r]["kinds_us"].values()) for r in ("source", "target")]
    row = max(out["source"]["root_us"], out["target"]["root_us"], 0.0)
    out.update(gap_us=t - s, ratio=t / s if s > 0 else None,
               root_is_runtime=bool(row > 0 and max(own) <= ROOT_MODEL_SHARE * row))
    return out


def source_runtime_share(runtime: Mapping[str, Any] | None) -> float:
    """The share of the target's runtime kinds (the outside-every-module rows a fix table holds)
    that the source's own runtime matches: what a fix of those kinds cannot claim as a gap. The
    target's own time between ops is matched first: it is runtime too, and no kind's fix cuts it."""
    if not runtime:
        return 0.0
    kinds = sum(runtime["target"]["kinds_us"].values())
    if kinds <= 0:
        return 0.0
    matched = max(runtime["source"]["total_us"] - runtime["target"]["between_us"], 0.0)
    return float(min(matched / kinds, 1.0))
