"""Both runs of a diagnosis (or one bundle) on one Perfetto timeline: `porter export --perfetto`.

Perfetto's own trace diff is an open request, and no profiler puts two vendors' runs side by
side, so porter writes them into one `.pftrace`: one process per side, a track for the host's
framework ops and one per device stream, each op and kernel a slice named as in the report
with its module, class, matched group and gap as arguments; each matched group linked source
-> target by a flow, and the largest gaps copied onto a "largest gaps" track per side so they
stand out. The trace is TrackEvent protobuf written with the `perfetto` package's builder (its
generated protos: the schema stays Perfetto's); its trace processor binary is not needed.

Each side's clock starts at its own first event (the two runs were never on one clock), so the
timelines line up at their starts, not at any shared instant.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from porter.core.atomic import atomic_write_bytes
from porter.core.errors import PorterError

if TYPE_CHECKING:  # the tables load only when a timeline is built: `export`'s usage errors stay instant
    import numpy as np
    import pandas as pd

PAIR_TIMELINE = "pair.pftrace"  # in a diagnosis directory: what `export` and `diagnose --perfetto` write
SEQUENCE_ID = 1  # one writer, one packet sequence
WORST_GROUPS = 10  # groups copied onto each side's "largest gaps" track
CLAMP_NS = 1_000  # a child past its parent's end by at most this (rounding in the trace) is clamped to it


@dataclass
class Slice:
    """One slice on one track, in integer nanoseconds from the side's first event."""

    track: int
    start_ns: int
    end_ns: int
    name: str
    args: dict[str, Any]
    op_id: int = -1
    group: int | None = None
    depth: int = 0
    flow_out: int | None = None  # flow id this slice starts (the source side of a group)
    flow_in: int | None = None  # flow id this slice ends (the target side)


@dataclass
class Track:
    uuid: int
    name: str
    parent: int
    rank: int  # order among its siblings


@dataclass
class Side:
    """One run as tracks and slices, with its process descriptor."""

    role: str  # "source", "target" or "bundle"
    title: str
    pid: int
    tracks: list[Track] = field(default_factory=list)
    slices: list[Slice] = field(default_factory=list)

    @property
    def uuid(self) -> int:
        return self.pid << 32


@dataclass(frozen=True)
class TimelineSummary:
    """What was written: for the CLI's one line and for the tests."""

    path: Path
    sides: int
    tracks: int
    slices: int
    flows: int
    bytes: int


def _ns(us: np.ndarray) -> np.ndarray:
    import numpy as np

    return np.round(np.asarray(us, dtype=np.float64) * 1000.0).astype(np.int64)


def nest(slices: list[Slice]) -> list[list[Slice]]:
    """Split slices into lanes in which every two slices are disjoint or nested (what one
    Perfetto track can draw); each slice gets its depth in its lane."""
    lanes: list[list[Slice]] = []
    stacks: list[list[Slice]] = []
    for s in sorted(slices, key=lambda s: (s.start_ns, -s.end_ns)):
        for lane, stack in zip(lanes, stacks):
            while stack and stack[-1].end_ns <= s.start_ns:
                stack.pop()
            if stack and s.end_ns > stack[-1].end_ns and s.end_ns - stack[-1].end_ns <= CLAMP_NS:
                s.end_ns = stack[-1].end_ns
            if not stack or s.end_ns <= stack[-1].end_ns:
                s.depth = len(stack)
                stack.append(s)
                lane.append(s)
                break
        else:
            s.depth = 0
            lanes.append([s])
            stacks.append([s])
    return lanes


def _groups_by_op(groups: Iterable[dict], key: str) -> dict[int, dict]:
    out: dict[int, dict] = {}
    for g in groups:
        for op_id in g.get(key) or ():
            out.setdefault(int(op_id), g)
    return out


def _inherit(ops: pd.DataFrame, direct: dict[int, dict]) -> dict[int, dict]:
    """Each op's group: its own, else its nearest ancestor's (a launcher's children are its work)."""
    parent = dict(zip(ops["op_id"].astype(int), ops["parent_id"].astype(int)))
    memo: dict[int, dict | None] = {}

    def find(op_id: int) -> dict | None:
        chain = []
        while op_id >= 0 and op_id not in memo:
            if op_id in direct:
                memo[op_id] = direct[op_id]
                break
            chain.append(op_id)
            nxt = parent.get(op_id, -1)
            if nxt == op_id:
                break
            op_id = nxt
        found = memo.get(op_id) if op_id >= 0 else None
        for c in chain:
            memo[c] = found
        return found

    return {op_id: g for op_id in parent if (g := find(op_id)) is not None}


def _text(v: Any) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return ""
    return str(v)


def _group_args(g: dict | None) -> dict[str, Any]:
    if not g:
        return {}
    args = {"group": int(g["group_id"]), "group module": _text(g.get("module")),
            "group gap us": round(float(g.get("delta_us") or 0.0), 3)}
    if g.get("ratio") is not None:
        args["group ratio"] = round(float(g["ratio"]), 4)
    return args


def build_side(role: str, title: str, pid: int, ops: pd.DataFrame, kernels: pd.DataFrame,
               groups: list[dict], id_key: str) -> Side:
    """One run's tracks and slices. Ops that are their own device record (XLA's HLO ops, whose
    kernel row repeats them) are drawn once, on their device stream."""
    import numpy as np

    side = Side(role, title, pid)
    direct = _groups_by_op(groups, id_key)
    group_of = _inherit(ops, direct) if len(ops) else {}
    origin = min([float(ops["start_us"].min()) if len(ops) else np.inf,
                  float(kernels["start_us"].min()) if len(kernels) else np.inf])
    origin = 0.0 if not np.isfinite(origin) else origin
    by_id = ops.set_index("op_id", drop=False) if len(ops) else ops
    dev = kernels[kernels["device_id"].astype(int) >= 0] if len(kernels) else kernels
    repeated: set[int] = set()
    if len(dev) and len(ops):
        joined = dev.merge(ops[["op_id", "name", "start_us"]], on="op_id", suffixes=("", "_op"))
        same = (joined["name"] == joined["name_op"]) & (np.abs(joined["start_us"] - joined["start_us_op"]) < 1e-3)
        repeated = set(joined.loc[same, "op_id"].astype(int))
    host = ops[~ops["op_id"].astype(int).isin(repeated) & (ops["host_us"].fillna(0) > 0)] if len(ops) else ops
    next_uuid = iter(range(side.uuid + 1, side.uuid + (1 << 31)))
    rank = 0

    def add_track(name: str, slices: list[Slice]) -> None:
        nonlocal rank
        for i, lane in enumerate(nest(slices)):
            t = Track(next(next_uuid), name if i == 0 else f"{name} ({i + 1})", side.uuid, rank)
            rank += 1
            side.tracks.append(t)
            for s in lane:
                s.track = t.uuid
            side.slices.extend(lane)

    def op_args(op_id: int) -> dict[str, Any]:
        if op_id not in by_id.index:
            return {}
        r = by_id.loc[op_id]
        args = {"module": _text(r["module"]), "class": _text(r["op_class"]), "framework op": _text(r["framework_op"]),
                "device us": round(float(r["device_us"]), 3)}
        shapes = _text(r.get("input_shapes"))
        if shapes:
            args["input shapes"] = " ".join(shapes.split())
        return {k: v for k, v in args.items() if v != ""}

    if len(host):
        start = _ns(host["start_us"].to_numpy() - origin)
        end = start + np.maximum(_ns(host["host_us"].to_numpy()), 1)
        slices = []
        for op_id, name, s0, s1 in zip(host["op_id"].astype(int), host["name"].astype(str), start, end):
            g = group_of.get(op_id)
            slices.append(Slice(0, int(s0), int(s1), name, op_args(op_id) | _group_args(g), op_id,
                                int(g["group_id"]) if g else None))
        add_track("host: framework ops", slices)
    if len(dev):
        for (device, stream), part in dev.groupby([dev["device_id"].astype(int), dev["stream"].astype(np.int64)], sort=True):
            start = _ns(part["start_us"].to_numpy() - origin)
            end = start + np.maximum(_ns(part["dur_us"].to_numpy()), 1)
            slices = []
            for op_id, name, kind, s0, s1 in zip(part["op_id"].astype(int), part["name"].astype(str),
                                                part["kind"].astype(str), start, end):
                g = group_of.get(op_id)
                args = {"kind": kind} | op_args(op_id) | _group_args(g)
                if op_id not in repeated and op_id in by_id.index:
                    args["launched by"] = str(by_id.loc[op_id, "name"])
                slices.append(Slice(0, int(s0), int(s1), name, args, op_id if op_id in repeated else -1,
                                    int(g["group_id"]) if g else None))
            add_track(f"device {device} stream {stream}", slices)
    worst = sorted((g for g in groups if g.get(id_key)), key=lambda g: -abs(float(g.get("delta_us") or 0.0)))[:WORST_GROUPS]
    rank_of = {int(g["group_id"]): i + 1 for i, g in enumerate(worst)}
    copies = [Slice(0, s.start_ns, s.end_ns, f"#{rank_of[s.group]} gap {float(direct[s.op_id]['delta_us']):+.1f} us: {s.name}",
                    dict(s.args), -1, s.group)
              for s in side.slices if s.group in rank_of and s.op_id in direct and int(direct[s.op_id]["group_id"]) == s.group]
    if copies:
        add_track(f"largest gaps (top {len(rank_of)} groups)", copies)
    return side


def link_groups(source: Side, target: Side, groups: list[dict]) -> int:
    """A flow per matched group from its first slice on the source to its first on the target."""
    def firsts(side: Side, key: str) -> dict[int, Slice]:
        ids = {int(op): int(g["group_id"]) for g in groups for op in (g.get(key) or ())}
        out: dict[int, Slice] = {}
        for s in side.slices:
            gid = ids.get(s.op_id)
            if gid is not None and (gid not in out or s.start_ns < out[gid].start_ns):
                out[gid] = s
        return out

    src, tgt = firsts(source, "source_op_ids"), firsts(target, "target_op_ids")
    flows = 0
    for gid in sorted(src.keys() & tgt.keys()):
        flow = gid + 1  # 0 is not a flow id
        src[gid].flow_out, tgt[gid].flow_in = flow, flow
        flows += 1
    return flows


def _packets(sides: list[Side]) -> Iterable[Any]:
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TracePacket, TrackDescriptor, TrackEvent

    first = True
    for side in sides:
        p = TracePacket()
        p.trusted_packet_sequence_id = SEQUENCE_ID
        if first:
            p.sequence_flags = TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
            first = False
        d = p.track_descriptor
        d.uuid = side.uuid
        d.process.pid = side.pid
        d.process.process_name = side.title
        d.child_ordering = TrackDescriptor.EXPLICIT
        yield p
        for t in side.tracks:
            p = TracePacket()
            p.trusted_packet_sequence_id = SEQUENCE_ID
            p.track_descriptor.uuid = t.uuid
            p.track_descriptor.parent_uuid = t.parent
            p.track_descriptor.name = t.name
            p.track_descriptor.sibling_order_rank = t.rank
            yield p
    # begins and ends in time order; at one instant ends first (deepest first), then begins (outermost first)
    events = [(s.start_ns, 1, s.depth, i, s) for side in sides for i, s in enumerate(side.slices)]
    events += [(s.end_ns, 0, -s.depth, i, s) for side in sides for i, s in enumerate(side.slices)]
    events.sort(key=lambda e: e[:4])
    for ts, begin, _, _, s in events:
        p = TracePacket()
        p.trusted_packet_sequence_id = SEQUENCE_ID
        p.timestamp = ts
        e = p.track_event
        e.track_uuid = s.track
        if begin:
            e.type = TrackEvent.TYPE_SLICE_BEGIN
            e.name = s.name
            for k, v in s.args.items():
                a = e.debug_annotations.add(name=k)
                if isinstance(v, bool) or isinstance(v, str):
                    a.string_value = str(v)
                elif isinstance(v, int):
                    a.int_value = v
                else:
                    a.double_value = float(v)
            if s.flow_out is not None:
                e.flow_ids.append(s.flow_out)
            if s.flow_in is not None:
                e.terminating_flow_ids.append(s.flow_in)
        else:
            e.type = TrackEvent.TYPE_SLICE_END
        yield p


def check_destination(out: Path) -> Path:
    """The .pftrace to write: a file name, never a directory; checked before any table loads."""
    out = Path(out)
    if out.is_dir():
        raise PorterError("is a directory; porter export writes one .pftrace file", path=out,
                          hint=f"name the file: -o {out / 'run.pftrace'}")
    if out.suffix not in (".pftrace", ".perfetto-trace", ".pb"):
        raise PorterError(f"a Perfetto trace is named *.pftrace, not {out.name!r}", path=out,
                          hint=f"-o {out.with_suffix('.pftrace')}")
    return out


def write_timeline(sides: list[Side], out: Path, flows: int) -> TimelineSummary:
    """Serialise the sides into one .pftrace, staged and renamed into place."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace

    trace = Trace()
    for p in _packets(sides):
        trace.packet.append(p)
    data = trace.SerializeToString()
    atomic_write_bytes(out, data)
    return TimelineSummary(out, len(sides), sum(len(s.tracks) for s in sides), sum(len(s.slices) for s in sides),
                           flows, len(data))


def _title(role: str, manifest: dict[str, Any], fallback: str) -> str:
    device = (manifest.get("device") or {}).get("name") or (manifest.get("device") or {}).get("type") or ""
    target = manifest.get("target") or {}
    stack = target.get("stack") if isinstance(target, dict) else None
    what = ", ".join(x for x in (str(device), str(stack or manifest.get("profiler") or "")) if x)
    return f"{role}: {what}" if what else f"{role}: {fallback}"


def export_diagnosis(diag: Path, out: Path) -> TimelineSummary:
    """A diagnosis directory (diagnosis.json with its source/ and target/ bundles) as one timeline."""
    from porter.bundles.bundle import load_bundle

    try:
        doc = json.loads((diag / "diagnosis.json").read_text())
    except (OSError, ValueError) as exc:
        raise PorterError(f"unreadable diagnosis.json ({exc})", path=diag) from None
    groups = [g for g in doc.get("groups") or [] if isinstance(g, dict) and "group_id" in g]
    sides = []
    for pid, role in ((1, "source"), (2, "target")):
        if not (diag / role / "manifest.json").is_file():
            raise PorterError(f"the diagnosis has no {role} bundle", path=diag / role,
                              hint="diagnose again (it writes both bundles beside diagnosis.json)")
        b = load_bundle(diag / role)
        sides.append(build_side(role, _title(role, b.manifest, b.label), pid, b.ops, b.kernels, groups,
                                f"{role}_op_ids"))
    flows = link_groups(sides[0], sides[1], groups)
    return write_timeline(sides, out, flows)


def export_bundle(ops: pd.DataFrame, kernels: pd.DataFrame, manifest: dict[str, Any], label: str,
                  out: Path) -> TimelineSummary:
    """One bundle (or trace) as a timeline: its host ops and device streams, no groups."""
    side = build_side("run", _title("run", manifest, label), 1, ops, kernels, [], "op_ids")
    return write_timeline([side], out, 0)
