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
