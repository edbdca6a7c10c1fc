"""Which XSpace events are device work: XSpace plane access and the three event sources.

* GPU device planes: every event on ``Stream #N(...)`` lines (CUPTI / roctracer activity).
* TPU device planes: every leaf event on the ``XLA Ops`` line; the ``XLA Modules`` line
  says which program each ran in.
* XLA:CPU: every leaf thunk event with an ``hlo_op`` stat on ``/host:CPU``.
Nested events on one line (a while/call thunk around its body) count only the leaves,
so no time is counted twice. Times stay integer picoseconds here.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from porter.core.errors import TraceFormatError
from porter.core.schema import NO_ID
from profilers.xla_hlo import HloIndex, index_module
from profilers.xspace_proto import DecodeError, parse_hlo_proto

DEVICE_PLANE = re.compile(r"^/device:(GPU|TPU|[A-Z_]+):(\d{1,18})(?!\d)")  # ids fit int64
STREAM = re.compile(r"^Stream #(\d{1,18})(?!\d)")
PROGRAM_IN_NAME = re.compile(r"\((\d{1,18})\)$")
XLA_OPS_LINE = "XLA Ops"
XLA_MODULES_LINE = "XLA Modules"
HLO_PROTO_STAT = "Hlo Proto"


def text(b: bytes) -> str:
    return b.decode("utf-8", "replace")


class PlaneView:
    """Names for one plane's event and stat metadata ids, and stat decoding."""

    def __init__(self, plane: Any):
        self.plane = plane
        self.name = text(plane.name)
        self.stat_names = {e.key: text(e.value.name) for e in plane.stat_metadata}
        self.event_meta = {e.key: e.value for e in plane.event_metadata}
        self._event_names: dict[int, str] = {}
        self._meta_stats: dict[int, dict[str, Any]] = {}

    def value(self, stat: Any) -> Any:
        kind = stat.WhichOneof("value")
        if kind == "str_value":
            return text(stat.str_value)
        if kind == "ref_value":
            return self.stat_names.get(stat.ref_value, "")
        if kind is None:
            return None
        return getattr(stat, kind)

    def stats(self, stats: Any) -> dict[str, Any]:
        return {self.stat_names.get(s.metadata_id, str(s.metadata_id)): self.value(s) for s in stats}

    def event_name(self, metadata_id: int) -> str:
        name = self._event_names.get(metadata_id)
        if name is None:
            md = self.event_meta.get(metadata_id)
            name = text(md.name or md.display_name) if md is not None else ""
            self._event_names[metadata_id] = name
        return name

    def op_name(self, metadata_id: int) -> str:
        """The metadata's display name (a TPU op's HLO op name), else its name."""
        md = self.event_meta.get(metadata_id)
        return text(md.display_name) if md is not None and md.display_name else self.event_name(metadata_id)

    def event_stats(self, event: Any) -> dict[str, Any]:
        """Stats of the event's metadata (TPU keeps per-op facts there), then its own."""
        base = self._meta_stats.get(event.metadata_id)
        if base is None:
            md = self.event_meta.get(event.metadata_id)
            base = self.stats(md.stats) if md is not None else {}
            self._meta_stats[event.metadata_id] = base
        return {**base, **self.stats(event.stats)} if event.stats else dict(base)


@dataclass
class Event:
    """One counted device activity, times in picoseconds on the trace's clock."""

    plane: int  # device index
    line: int  # stream / thread id
    line_name: str
    name: str
    start_ps: int
    dur_ps: int
    stats: dict[str, Any]

    @property
    def end_ps(self) -> int:
        return self.start_ps + self.dur_ps


def line_events(view: PlaneView, line: Any, path: Path) -> list[tuple[int, int, Any]]:
    """(start_ps, dur_ps, XEvent) of a line; damaged negative durations are refused."""
    base = line.timestamp_ns * 1000
    out = []
    for ev in line.events:
        if ev.duration_ps < 0 or ev.offset_ps < 0:
            raise TraceFormatError(f"plane {view.name!r} line {text(line.name)!r} has an event with a negative time "
                                   "(damaged XSpace)", path=path)
        out.append((base + ev.offset_ps, ev.duration_ps, ev))
    return out


def _encloses(items: list[tuple[int, int, Any]], i: int) -> bool:
    """Whether items[i] holds the next event of positive length that starts inside it. Instants
    (zero-length events: a TPU copy-start beside its op, or at its end) make nothing a container."""
    start, dur, _ = items[i]
    end = start + dur
    for j in range(i + 1, len(items)):
        nxt_start, nxt_dur, _ = items[j]
        if nxt_start >= end:
            return False
        if nxt_dur > 0:
            return nxt_start + nxt_dur <= end
    return False


def _leaves(items: list[tuple[int, int, Any]]) -> tuple[list[tuple[int, int, Any]], int]:
    """Drop events that enclose a later event on the same line (containers); count them."""
    items = sorted(items, key=lambda t: (t[0], -t[1]))
    keep: list[tuple[int, int, Any]] = []
    dropped = 0
    for i, item in enumerate(items):
        if _encloses(items, i):
            dropped += 1
            continue
        keep.append(item)
    return keep, dropped


def device_index(name: str) -> int:
    m = DEVICE_PLANE.match(name)
    return int(m.group(2)) if m else NO_ID


def _stream_id(line: Any) -> int:
    m = STREAM.match(text(line.display_name or line.name))
    return int(m.group(1)) if m else int(line.id)


def device_events(views: list[PlaneView], path: Path) -> tuple[list[Event], int, list[PlaneView]]:
    """Activity on GPU stream lines or TPU 'XLA Ops' lines of every device plane, and the
    planes that had any."""
    events: list[Event] = []
    containers = 0
    active: list[PlaneView] = []
    for view in views:
        before = len(events)
        dev = device_index(view.name)
        lines = [ln for ln in view.plane.lines if STREAM.match(text(ln.name))]
        tpu_style = not lines
        if tpu_style:
            lines = [ln for ln in view.plane.lines if text(ln.name) == XLA_OPS_LINE]
        modules = _module_spans(view, path) if tpu_style else None
        for line in lines:
            items, dropped = _leaves(line_events(view, line, path))
            containers += dropped
            lname = text(line.display_name or line.name)
            for start, dur, ev in items:
                stats = view.event_stats(ev)
                if modules is not None and "hlo_module" not in stats:
                    stats.update(modules.at(start))
                # A TPU op's metadata name is its whole HLO text; its display name is the HLO op
                # name xprof shows (hlo_op_name), which is also what the HloProto calls it.
                name = view.op_name(ev.metadata_id) if tpu_style else view.event_name(ev.metadata_id)
                if tpu_style and "hlo_op" not in stats:
                    stats["hlo_op"] = name
                # The TPU's own clock of the op (what xprof's hlo_stats sums); the event's span
                # is the host-synchronised one and runs up to 13% long or short on async copies.
                device_dur = stats.get("device_duration_ps") if tpu_style else None
                if isinstance(device_dur, int) and device_dur >= 0:
                    dur = device_dur
                events.append(Event(dev, _stream_id(line), lname, name, start, dur, stats))
        if len(events) > before:
            active.append(view)
    return events, containers, active


class _ModuleSpans:
    """XLA Modules line of a TPU plane: which program ran at a time."""

    def __init__(self, spans: list[tuple[int, int, str]]):
        self.spans = sorted(spans)
        self.starts = [s for s, _, _ in self.spans]

    def at(self, t: int) -> dict[str, Any]:
        i = bisect_right(self.starts, t) - 1
        if i < 0 or t > self.spans[i][1]:
            return {}
        name = self.spans[i][2]
        m = PROGRAM_IN_NAME.search(name)
        out: dict[str, Any] = {"hlo_module": PROGRAM_IN_NAME.sub("", name)}
        if m:
            out["program_id"] = int(m.group(1))
        return out


def _module_spans(view: PlaneView, path: Path) -> _ModuleSpans:
    spans = []
    for line in view.plane.lines:
        if text(line.name) == XLA_MODULES_LINE:
            for start, dur, ev in line_events(view, line, path):
                spans.append((start, start + dur, view.event_name(ev.metadata_id)))
    return _ModuleSpans(spans)


def cpu_thunk_events(view: PlaneView, path: Path) -> tuple[list[Event], int]:
    """XLA:CPU thunk executions on /host:CPU: events with an hlo_op stat."""
    events: list[Event] = []
    containers = 0
    for line in view.plane.lines:
        thunks = []
        for start, dur, ev in line_events(view, line, path):
            stats = view.event_stats(ev)
            if "hlo_op" in stats:
                thunks.append((start, dur, (ev, stats)))
        kept, dropped = _leaves(thunks)
        containers += dropped
        lname = text(line.display_name or line.name)
        for start, dur, (ev, stats) in kept:
            dev = stats.get("device_ordinal", 0)
            events.append(Event(dev if isinstance(dev, int) else 0, int(line.id), lname,
                                view.event_name(ev.metadata_id), start, dur, stats))
    return events, containers


def hlo_index(meta: PlaneView | None) -> tuple[HloIndex, int]:
    """HLO modules from /host:metadata; returns the index and how many protos failed."""
    index = HloIndex()
    bad = 0
    if meta is None:
        return index, bad
    for md in meta.event_meta.values():
        stats = {meta.stat_names.get(s.metadata_id, ""): s for s in md.stats}
        proto = stats.get(HLO_PROTO_STAT)
        if proto is None:
            continue
        try:
            module = index_module(parse_hlo_proto(proto.bytes_value))
        except DecodeError:
            bad += 1
            continue
        pid_stat = stats.get("program_id")
        program_id = meta.value(pid_stat) if pid_stat is not None else None
        if not isinstance(program_id, int):
            m = PROGRAM_IN_NAME.search(text(md.name))
            program_id = int(m.group(1)) if m else None
        index.add(program_id, module)
    return index, bad


def host_launches(view: PlaneView | None, path: Path) -> dict[int, tuple[int, int]]:
    """correlation id -> (first start, total duration) of the host launch API calls that
    carry it (GPU runtimes tag launches with it)."""
    out: dict[int, tuple[int, int]] = {}
    if view is None:
        return out
    corr_ids = {k for k, v in view.stat_names.items() if v == "correlation_id"}
    for line in view.plane.lines:
        for start, dur, ev in line_events(view, line, path):
            for s in ev.stats:
                if s.metadata_id in corr_ids:
                    corr = view.value(s)
                    if isinstance(corr, int):
                        first, total = out.get(corr, (start, 0))
                        out[corr] = (min(first, start), total + dur)
                    break
    return out
