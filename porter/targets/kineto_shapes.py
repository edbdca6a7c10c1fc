"""Op shapes from one profiled step, op times from steps profiled without them.

With ``record_shapes=True`` PyTorch's profiler makes eager elementwise work on large tensors
page-fault: GPT-2 at hidden 512 (2x128x2048 activations, one intra-op thread, process CPU
time per call of its GELU's eight eager ops) took 2.4-3.1 ms unprofiled with 0-256 minor
faults, 2.7-4.1 ms profiled without shapes with 0 faults, and 10.2-12.8 ms profiled with
shapes with 3585-4096 faults per call. The profile then said the GELU was 3-4x its cost and,
each side's profiled share being scaled to its unprofiled step, shrank every other module
of that side. So a torch capture profiles twice: one step with shapes and FLOPs, then the
timed steps without, and copy_shapes puts the first step's shape arguments on every timed
step's ops, matched by position: the ops of one step, on the thread that runs the steps, in
start order (an eager or compiled forward calls the same ops in the same order each step),
names aligned as sequences. A step where an op finds no partner gets none, and the capture
falls back to one pass with shapes (ShapeCopy.complete).
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

IDS = frozenset({"External id", "Record function id", "Ev Idx"})  # the timed trace's own: kernels link by them
STEP = "ProfilerStep#"


@dataclass(frozen=True)
class ShapeCopy:
    steps: int  # timed steps found
    matched: int  # steps whose ops took the shapes step's arguments

    @property
    def complete(self) -> bool:
        return self.steps > 0 and self.matched == self.steps


def _steps(events: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """cpu_op events of each ProfilerStep, on the step's own thread, in start order (a parent
    before the child that starts with it)."""
    steps = sorted((e for e in events if str(e.get("name", "")).startswith(STEP) and e.get("ph") == "X"),
                   key=lambda e: e["ts"])
    ops = sorted((e for e in events if e.get("cat") == "cpu_op" and e.get("ph") == "X"),
                 key=lambda e: (e["ts"], -e.get("dur", 0.0)))
    out = []
    for s in steps:
        lo, hi = s["ts"], s["ts"] + s.get("dur", 0.0)
        out.append([e for e in ops if e.get("tid") == s.get("tid") and lo <= e["ts"] <= hi])
    return out


def _pairs(reference: list[Any], step: list[Any]) -> dict[int, int]:
    """Index in the shapes step -> index in a timed step, over the runs of equal names (a
    compiled step's ranges differ by name between the passes: '## Call CompiledFxGraph
    None ##' appears only without shapes)."""
    out: dict[int, int] = {}
    for block in difflib.SequenceMatcher(None, reference, step, autojunk=False).get_matching_blocks():
        out.update((block.a + k, block.b + k) for k in range(block.size))
    return out


def copy_shapes(shapes_trace: Path, times_trace: Path) -> ShapeCopy:
    """Put the shapes step's op arguments (input dims, types, strides, concrete inputs, FLOPs)
    on each matching step of times_trace, rewritten in place; see the module doc. A step matches when every op of
    the shapes step that has shapes found its op (by name, in order) in it, and each of its
    framework ops ('ns::op') found one in the shapes step."""
    shaped = json.loads(Path(shapes_trace).read_text())
    doc = json.loads(Path(times_trace).read_text())
    reference = _steps(shaped["traceEvents"])
    timed = _steps(doc["traceEvents"])
    if not reference or not timed:
        return ShapeCopy(len(timed), 0)
    model = reference[-1]
    names = [e.get("name") for e in model]
    shaped_at = [i for i, e in enumerate(model) if "Input Dims" in (e.get("args") or {})]
    matched = 0
    for step in timed:
        pairs = _pairs(names, [e.get("name") for e in step])
        paired = set(pairs.values())
        if any(i not in pairs for i in shaped_at) or any(
                j not in paired and "::" in str(e.get("name")) for j, e in enumerate(step)):
            continue
        for i, j in pairs.items():
            extra = {k: v for k, v in (model[i].get("args") or {}).items() if k not in IDS}
            step[j]["args"] = {**(step[j].get("args") or {}), **extra}
        matched += 1
    for key in ("record_shapes", "with_flops"):
        if key in shaped:
            doc[key] = shaped[key]
    tmp = Path(times_trace).with_suffix(".shaped.tmp")
    tmp.write_text(json.dumps(doc))
    tmp.replace(times_trace)
    return ShapeCopy(len(timed), matched)
