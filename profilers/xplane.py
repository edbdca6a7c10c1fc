"""XLA/JAX XSpace protobuf (``*.xplane.pb``) from TPU, GPU and CPU runs.

What is counted as device work, one kernels row each:
* GPU: every event on a device plane's ``Stream #N(...)`` lines (CUPTI / roctracer
  activity). Consecutive kernels of one HLO op (stats ``hlo_op``, ``hlo_module``) on a
  stream form one op invocation; a repeat of a kernel already in the group starts the
  next invocation. Kernels without an HLO op (runtime copies) get a synthetic op each.
* TPU: every leaf event on a device plane's ``XLA Ops`` line (one HLO op execution each).
* XLA:CPU (no device planes): every leaf thunk event with an ``hlo_op`` stat on
  ``/host:CPU``; the CPU is the device, so a thunk is both the kernel and the op.
Nested events on one line (a while/call thunk around its body) count only the leaves,
so no time is counted twice.

Each op's module scope and jax primitive come from the HLO op_name metadata in the
HloProtos the XSpace carries on ``/host:metadata`` (profilers.xla_hlo). We walk the
protobuf ourselves (profilers.xspace_proto) rather than use xprof's hlo_stats tool: that
tool aggregates per HLO op (no per-invocation rows), writes cache files beside the input,
and returns nothing for XLA:CPU traces.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from porter.errors import TraceFormatError
from porter.opclass import classify
from porter.schema import NO_ID, NO_MODULE
from profilers.base import ReadResult, TraceMeta, read_bytes
from profilers.xla_hlo import HloIndex, index_module
from profilers.xspace_proto import DecodeError, parse_hlo_proto, parse_xspace

FORMAT = "xplane"
SUFFIX = ".xplane.pb"

_PLANE_NAMES = (b"/host:", b"/device:", b"/custom:", b"Task Environment")
_DEVICE_PLANE = re.compile(r"^/device:(GPU|TPU|[A-Z_]+):(\d+)")
_STREAM = re.compile(r"^Stream #(\d+)")
_MEMCPY = re.compile(r"memcpy|copyBuffer|Memcpy", re.IGNORECASE)
_MEMSET = re.compile(r"memset|fillBuffer", re.IGNORECASE)
_PROGRAM_IN_NAME = re.compile(r"\((\d+)\)$")
XLA_OPS_LINE = "XLA Ops"
XLA_MODULES_LINE = "XLA Modules"
HLO_PROTO_STAT = "Hlo Proto"


# ---------------------------------------------------------------- sniffing

def _varint(buf: bytes, i: int) -> tuple[int, int]:
    value, shift = 0, 0
    while i < len(buf) and shift < 64:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return value, i
    return -1, i


def looks_like_xspace(head: bytes) -> bool:
    """True when the bytes open with an XSpace's first plane and a known plane name."""
    if len(head) < 4 or head[0] != 0x0A:  # field 1 (planes), length-delimited
        return False
    length, i = _varint(head, 1)
    if length <= 0:
        return False
    if i < len(head) and head[i] == 0x08:  # plane id
        _, i = _varint(head, i + 1)
    if i >= len(head) or head[i] != 0x12:  # plane name
        return False
    n, i = _varint(head, i + 1)
    return n > 0 and head[i:i + n].startswith(_PLANE_NAMES)


def sniff(path: Path, head: bytes) -> bool:
    return Path(path).name.endswith(SUFFIX) or looks_like_xspace(head)


# ---------------------------------------------------------------- plane access

def _text(b: bytes) -> str:
    return b.decode("utf-8", "replace")


class PlaneView:
    """Names for one plane's event and stat metadata ids, and stat decoding."""

    def __init__(self, plane: Any):
        self.plane = plane
        self.name = _text(plane.name)
        self.stat_names = {e.key: _text(e.value.name) for e in plane.stat_metadata}
        self.event_meta = {e.key: e.value for e in plane.event_metadata}
        self._event_names: dict[int, str] = {}
        self._meta_stats: dict[int, dict[str, Any]] = {}

    def value(self, stat: Any) -> Any:
        kind = stat.WhichOneof("value")
        if kind == "str_value":
            return _text(stat.str_value)
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
            name = _text(md.name or md.display_name) if md is not None else ""
            self._event_names[metadata_id] = name
        return name

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


def _line_events(view: PlaneView, line: Any, path: Path) -> list[tuple[int, int, Any]]:
    """(start_ps, dur_ps, XEvent) of a line; damaged negative durations are refused."""
    base = line.timestamp_ns * 1000
    out = []
    for ev in line.events:
        if ev.duration_ps < 0 or ev.offset_ps < 0:
            raise TraceFormatError(f"plane {view.name!r} line {_text(line.name)!r} has an event with a negative time "
                                   "(damaged XSpace)", path=path)
        out.append((base + ev.offset_ps, ev.duration_ps, ev))
    return out


def _leaves(items: list[tuple[int, int, Any]]) -> tuple[list[tuple[int, int, Any]], int]:
    """Drop events that enclose a later event on the same line (containers); count them."""
    items = sorted(items, key=lambda t: (t[0], -t[1]))
    keep: list[tuple[int, int, Any]] = []
    dropped = 0
    for i, item in enumerate(items):
        end = item[0] + item[1]
        nxt = items[i + 1] if i + 1 < len(items) else None
        if nxt is not None and nxt[0] + nxt[1] <= end:
            dropped += 1
            continue
        keep.append(item)
    return keep, dropped


# ---------------------------------------------------------------- the three sources

def _device_index(name: str) -> int:
    m = _DEVICE_PLANE.match(name)
    return int(m.group(2)) if m else NO_ID


def _stream_id(line: Any) -> int:
    m = _STREAM.match(_text(line.display_name or line.name))
    return int(m.group(1)) if m else int(line.id)


def device_events(views: list[PlaneView], path: Path) -> tuple[list[Event], int]:
    """Activity on GPU stream lines or TPU 'XLA Ops' lines of every device plane."""
    events: list[Event] = []
    containers = 0
    for view in views:
        dev = _device_index(view.name)
        lines = [ln for ln in view.plane.lines if _STREAM.match(_text(ln.name))]
        tpu_style = not lines
        if tpu_style:
            lines = [ln for ln in view.plane.lines if _text(ln.name) == XLA_OPS_LINE]
        modules = _module_spans(view, path) if tpu_style else None
        for line in lines:
            items, dropped = _leaves(_line_events(view, line, path))
            containers += dropped
            lname = _text(line.display_name or line.name)
            for start, dur, ev in items:
                stats = view.event_stats(ev)
                if modules is not None and "hlo_module" not in stats:
                    stats.update(modules.at(start))
                if tpu_style and "hlo_op" not in stats:
                    stats["hlo_op"] = view.event_name(ev.metadata_id)
                events.append(Event(dev, _stream_id(line), lname, view.event_name(ev.metadata_id), start, dur, stats))
    return events, containers


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
        m = _PROGRAM_IN_NAME.search(name)
        out: dict[str, Any] = {"hlo_module": _PROGRAM_IN_NAME.sub("", name)}
        if m:
            out["program_id"] = int(m.group(1))
        return out


def _module_spans(view: PlaneView, path: Path) -> _ModuleSpans:
    spans = []
    for line in view.plane.lines:
        if _text(line.name) == XLA_MODULES_LINE:
            for start, dur, ev in _line_events(view, line, path):
                spans.append((start, start + dur, view.event_name(ev.metadata_id)))
    return _ModuleSpans(spans)


def cpu_thunk_events(view: PlaneView, path: Path) -> tuple[list[Event], int]:
    """XLA:CPU thunk executions on /host:CPU: events with an hlo_op stat."""
    events: list[Event] = []
    containers = 0
    dev_stat = "device_ordinal"
    for line in view.plane.lines:
        items = [(s, d, ev) for s, d, ev in _line_events(view, line, path)]
        thunks = []
        for start, dur, ev in items:
            stats = view.event_stats(ev)
            if "hlo_op" in stats:
                thunks.append((start, dur, (ev, stats)))
        kept, dropped = _leaves(thunks)
        containers += dropped
        lname = _text(line.display_name or line.name)
        for start, dur, (ev, stats) in kept:
            dev = stats.get(dev_stat, 0)
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
            m = _PROGRAM_IN_NAME.search(_text(md.name))
            program_id = int(m.group(1)) if m else None
        index.add(program_id, module)
    return index, bad


# ---------------------------------------------------------------- tables

def _kind(ev: Event) -> str:
    text = f"{ev.name} {ev.line_name}"
    if _MEMSET.search(text):
        return "memset"
    if _MEMCPY.search(text):
        return "memcpy"
    return "kernel"


def _program(stats: dict[str, Any]) -> int | None:
    pid = stats.get("program_id")
    return pid if isinstance(pid, int) else None


def _group(events: list[Event]) -> list[list[Event]]:
    """Kernels -> op invocations: consecutive kernels of one HLO op on one GPU stream."""
    groups: list[list[Event]] = []
    by_line: dict[tuple[int, int], list[Event]] = {}
    for ev in events:
        by_line.setdefault((ev.plane, ev.line), []).append(ev)
    for evs in by_line.values():
        evs.sort(key=lambda e: e.start_ps)
        cur: list[Event] = []
        cur_key: tuple | None = None
        names: set[str] = set()
        for ev in evs:
            hlo = ev.stats.get("hlo_op")
            key = (hlo, ev.stats.get("hlo_module"), _program(ev.stats), ev.stats.get("run_id")) if hlo else None
            alone = key is None or not _STREAM.match(ev.line_name)  # thunks and TPU ops are one op each
            if not cur or alone or key != cur_key or ev.name in names:
                if cur:
                    groups.append(cur)
                cur, cur_key, names = [], key, set()
            cur.append(ev)
            names.add(ev.name)
        if cur:
            groups.append(cur)
    groups.sort(key=lambda g: (g[0].start_ps, g[0].plane, g[0].line))
    return groups


def build_tables(groups: list[list[Event]], index: HloIndex, device_type: str, device_name: str,
                 host_ps: dict[int, int]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One op row per group, one kernel row per event; times in us from the first event."""
    origin = min((g[0].start_ps for g in groups), default=0)
    ops: dict[str, list] = {k: [] for k in ("op_id", "name", "framework_op", "op_class", "module", "stream",
                                            "start_us", "host_us", "device_us", "kernel_count", "kernels", "synthetic")}
    kern: dict[str, list] = {k: [] for k in ("op_id", "name", "kind", "device_id", "stream", "start_us",
                                             "dur_us", "correlation")}
    for op_id, group in enumerate(groups):
        first = group[0]
        hlo = first.stats.get("hlo_op")
        knames = list(dict.fromkeys(e.name for e in group))
        if hlo:
            info = index.lookup(_program(first.stats), str(first.stats.get("hlo_module", "")), str(hlo), knames)
            name, fw, cls, module = str(hlo), info.framework_op, info.op_class, info.module
        else:
            name, fw, cls, module = first.name, "", classify("", knames), NO_MODULE
        dur_ps = sum(e.dur_ps for e in group)
        corr = [e.stats.get("correlation_id") for e in group]
        host = sum(host_ps.get(c, 0) for c in corr if isinstance(c, int))
        ops["op_id"].append(op_id)
        ops["name"].append(name)
        ops["framework_op"].append(fw)
        ops["op_class"].append(cls)
        ops["module"].append(module)
        ops["stream"].append(first.line)
        ops["start_us"].append((first.start_ps - origin) / 1e6)
        ops["host_us"].append((dur_ps if device_type == "cpu" else host) / 1e6)
        ops["device_us"].append(dur_ps / 1e6)
        ops["kernel_count"].append(len(group))
        ops["kernels"].append("\n".join(knames))
        ops["synthetic"].append(not hlo)
        for e, c in zip(group, corr):
            kern["op_id"].append(op_id)
            kern["name"].append(e.name)
            kern["kind"].append(_kind(e) if device_type != "cpu" else "kernel")
            kern["device_id"].append(e.plane)
            kern["stream"].append(e.line)
            kern["start_us"].append((e.start_ps - origin) / 1e6)
            kern["dur_us"].append(e.dur_ps / 1e6)
            kern["correlation"].append(c if isinstance(c, int) else NO_ID)
    n = len(groups)
    ops_df = pd.DataFrame({
        **ops, "parent_id": [NO_ID] * n, "step": [NO_ID] * n, "device_type": [device_type] * n,
        "device_name": [device_name] * n, "flops": [float("nan")] * n, "bytes": [float("nan")] * n,
        "input_shapes": [""] * n, "dtypes": [""] * n,
    })
    kern_df = pd.DataFrame({**kern, "step": [NO_ID] * len(kern["op_id"])})
    return ops_df, kern_df


# ---------------------------------------------------------------- device facts

def device_facts(device_views: list[PlaneView], hostnames: list[str]) -> tuple[str, str, dict[str, Any]]:
    """(device_type, device_name, device_properties) from the device planes' stats."""
    if not device_views:
        props = {"hostnames": hostnames}
        return "cpu", "XLA:CPU" + (f" on {hostnames[0]}" if hostnames else ""), props
    first = device_views[0]
    stats = {k: v for k, v in first.stats(first.plane.stats).items() if not isinstance(v, bytes)}
    kind = _DEVICE_PLANE.match(first.name)
    family = kind.group(1) if kind else "GPU"
    vendor = str(stats.get("device_vendor", ""))
    if family == "TPU":
        device_type = "tpu"
    elif "AMD" in vendor.upper():
        device_type = "rocm"
    elif "NVIDIA" in vendor.upper():
        device_type = "cuda"
    else:
        device_type = "gpu"
    model = next((str(stats[k]) for k in ("device_model", "device_type_string", "model", "device_name") if stats.get(k)), "")
    if not model:
        bits = []
        if "compute_cap_major" in stats:
            bits.append(f"compute capability {stats['compute_cap_major']}.{stats.get('compute_cap_minor', 0)}")
        if "core_count" in stats:
            bits.append(f"{stats['core_count']} cores")
        model = " ".join(x for x in (vendor, family) if x) + (f" ({', '.join(bits)})" if bits else "")
    props = {**stats, "device_count": len(device_views), "planes": [v.name for v in device_views], "hostnames": hostnames}
    return device_type, model, props


def _host_launch_ps(view: PlaneView | None, path: Path) -> dict[int, int]:
    """correlation id -> host launch API duration (GPU runtimes tag launches with it)."""
    out: dict[int, int] = {}
    if view is None:
        return out
    corr_ids = {k for k, v in view.stat_names.items() if v == "correlation_id"}
    for line in view.plane.lines:
        for _, dur, ev in _line_events(view, line, path):
            for s in ev.stats:
                if s.metadata_id in corr_ids:
                    corr = view.value(s)
                    if isinstance(corr, int):
                        out[corr] = out.get(corr, 0) + dur
                    break
    return out


# ---------------------------------------------------------------- reader

def load_space(path: Path) -> Any:
    data = read_bytes(path)
    try:
        space = parse_xspace(data)
    except (DecodeError, ValueError, RecursionError):
        raise TraceFormatError("not a readable XSpace protobuf (truncated, corrupt, or another format)",
                               path=path, hint="pass the *.xplane.pb that jax.profiler wrote") from None
    if not any(p.name.startswith(_PLANE_NAMES) for p in space.planes):
        raise TraceFormatError("parses as protobuf but is not an XSpace (no /host: or /device: planes)", path=path)
    return space


def read(path: Path) -> ReadResult:
    path = Path(path)
    space = load_space(path)
    views = [PlaneView(p) for p in space.planes]
    by_name = {v.name: v for v in views}
    meta_view, cpu_view = by_name.get("/host:metadata"), by_name.get("/host:CPU")
    events_read = sum(len(ln.events) for p in space.planes for ln in p.lines)
    index, bad_protos = hlo_index(meta_view)
    device_views = [v for v in views if _DEVICE_PLANE.match(v.name)]
    events, containers = device_events(device_views, path)
    active = {e.plane for e in events}
    device_views = [v for v in device_views if _device_index(v.name) in active]
    host_ps: dict[int, int] = {}
    if events:
        host_ps = _host_launch_ps(cpu_view, path)
        source = "device planes"
    elif cpu_view is not None:
        events, containers = cpu_thunk_events(cpu_view, path)
        source = "XLA:CPU thunks on /host:CPU"
    if not events:
        raise TraceFormatError("no XLA op executions found (no device activity and no XLA:CPU thunk events)",
                               path=path, hint="profile while the jitted function runs, with block_until_ready()")
    hostnames = [_text(h) for h in space.hostnames]
    device_type, device_name, props = device_facts(device_views, hostnames)
    ops, kernels = build_tables(_group(events), index, device_type, device_name, host_ps)
    versions = {}
    if meta_view is not None:
        mstats = meta_view.stats(meta_view.plane.stats)
        versions = {k.removesuffix("_version"): str(v) for k, v in mstats.items() if k in ("jax_version", "jaxlib_version")}
    meta = TraceMeta(
        profiler=FORMAT,
        device_type=device_type,
        device_name=device_name,
        device_properties=props,
        framework_versions=versions,
        events_read=events_read,
        extra={
            "source": source,
            "planes": [v.name for v in views],
            "hlo_modules": sorted(index.by_name),
            "container_events_skipped": containers,
            "undecodable_hlo_protos": bad_protos,
            "xspace_errors": [_text(e) for e in space.errors][:20],
            "xspace_warnings": [_text(w) for w in space.warnings][:20],
        },
    )
    return ReadResult(ops, kernels, meta)
