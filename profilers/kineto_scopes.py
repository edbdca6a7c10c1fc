"""Where and when a Kineto op ran: one time axis for all threads, steps and module scopes."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from porter.core.errors import TraceFormatError
from porter.core.factorize import factorize
from profilers.intervals import Nesting, Timeline
from profilers.kineto_events import NN_MODULE, Columns, take
from porter.core.tags import MODULE_TAG

STEP_RE = re.compile(r"ProfilerStep#(\d{1,18})$")  # longer numbers overflow int64: not a step


@dataclass
class Clock:
    """Relative times (us from the first event) and per-thread keys on one search axis."""

    t0: float
    timeline: Timeline
    thread_codes: dict[int, np.ndarray]

    def rel(self, cols: Columns) -> np.ndarray:
        return cols.ts - self.t0

    def key(self, cols: Columns) -> np.ndarray:
        return self.timeline.key(self.rel(cols), self.thread_codes[id(cols)])


def _codes(values: list) -> np.ndarray:
    """Dense codes for pid or tid values (ints, strings like "Spans", or None), from 1."""
    try:
        arr = np.array(values, dtype=np.int64)  # the common case: all ints
    except (TypeError, ValueError, OverflowError):
        arr = np.array(values, dtype=object)
    return factorize(arr)[0] + 1 if len(arr) else np.zeros(0, dtype=np.int64)


def make_clock(path, threaded: list[Columns], others: list[Columns]) -> Clock:
    """Clock over all groups; `threaded` groups get (pid, tid) thread codes for nesting."""
    groups = [g for g in threaded + others if len(g)]
    t0 = float(min(np.min(g.ts) for g in groups)) if groups else 0.0
    pc = _codes([p for g in threaded for p in g.pid])
    tc = _codes([t for g in threaded for t in g.tid])
    codes = pc * (int(tc.max(initial=0)) + 1) + tc
    timeline = Timeline.covering(*(g.ts + g.dur - t0 for g in groups))
    top = timeline.span * (float(codes.max(initial=0)) + 1.0)
    if not np.isfinite(top) or top > 1e300:
        raise TraceFormatError("timestamps out of range", path=path)
    out, at = {}, 0
    for g in threaded:
        out[id(g)] = codes[at : at + len(g)]
        at += len(g)
    return Clock(t0=t0, timeline=timeline, thread_codes=out)


@dataclass
class Markers:
    """Op-category ranges split into real ops (sorted by start), steps and porter scopes."""

    ops: Columns
    steps: Columns
    step_numbers: np.ndarray
    scopes: Columns


def _marker_kind(name: str) -> tuple[int, int]:
    """(0 op | 1 step | 2 porter scope | 3 ignored, step number or -1) for one range name."""
    if name.startswith("ProfilerStep#"):
        m = STEP_RE.match(name)
        return (1, int(m.group(1))) if m else (3, -1)  # a step marker whose number is damaged
    elif name.startswith(MODULE_TAG):
        return 2, -1
    return 0, -1


def separate_markers(cols: Columns) -> Markers:
    codes, uniques = factorize(np.array(cols.name, dtype=object))  # names repeat a lot
    kinds = np.array([_marker_kind(n) for n in uniques], dtype=np.int64).reshape(-1, 2)
    kind, step_num = kinds[codes, 0], kinds[codes, 1]
    ops_idx = np.flatnonzero(kind == 0)
    ops_idx = ops_idx[np.argsort(cols.ts[ops_idx], kind="stable")]
    steps_idx = np.flatnonzero(kind == 1)
    return Markers(
        ops=take(cols, ops_idx),
        steps=take(cols, steps_idx),
        step_numbers=step_num[steps_idx],
        scopes=take(cols, np.flatnonzero(kind == 2)),
    )


def steps_at(markers: Markers, clock: Clock, t: np.ndarray) -> np.ndarray:
    """ProfilerStep number around each relative time (steps span all threads), -1 outside."""
    rel = clock.rel(markers.steps)
    nest = Nesting(rel, rel + markers.steps.dur)
    return np.append(markers.step_numbers, -1)[nest.enclosing(t)]


MAX_STEP_SPANS = 10_000  # a long capture's step list stays a small part of the manifest


def step_spans(markers: Markers, clock: Clock) -> list[list[float]]:
    """[step, start_us, end_us] of each ProfilerStep range on the host, relative: a step's wall
    time, which a multi-rank view splits into compute, communication and idle."""
    rel = clock.rel(markers.steps)
    spans = sorted(zip(markers.step_numbers.tolist(), rel.tolist(), (rel + markers.steps.dur).tolist()))
    return [[int(n), float(a), float(b)] for n, a, b in spans[:MAX_STEP_SPANS]]


class Scopes:
    """Module path at any (thread, time): porter annotations first, then nn.Module chains."""

    def __init__(self, clock: Clock, porter: Columns, modules: Columns):
        pkey = clock.key(porter)
        self._porter = Nesting(pkey, pkey + porter.dur)
        self._porter_paths = np.array([n[len(MODULE_TAG):] for n in porter.name] + [""], dtype=object)
        mkey = clock.key(modules)
        self._modules = Nesting(mkey, mkey + modules.dur)
        self._module_paths = np.array(self._chains(modules.name, self._modules) + [""], dtype=object)

    @staticmethod
    def _chains(names: list[str], nest: Nesting) -> list[str]:
        parent = nest.parents()
        paths = [""] * len(names)
        for i in nest.order.tolist():  # parents sort before their children
            own = names[i][len(NN_MODULE):] if names[i].startswith(NN_MODULE) else names[i]
            p = parent[i]
            paths[i] = f"{paths[p]}/{own}" if p >= 0 else own
        return paths

    def at(self, keys: np.ndarray) -> np.ndarray:
        """Module path (object array, "" when none) around each timeline key."""
        porter = self._porter_paths[self._porter.enclosing(keys)]
        module = self._module_paths[self._modules.enclosing(keys)]
        return np.where(porter != "", porter, module)
