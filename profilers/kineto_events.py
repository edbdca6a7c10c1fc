"""Decode a Kineto (PyTorch profiler) JSON document into per-role numpy columns.

Speed and memory matter here: production traces run to millions of events and hundreds
of MB of JSON. msgspec decodes straight into slotted Structs that name only the fields
porter uses (everything else in `args`, flow events' ids, stacks, memory counters, is
skipped by the parser without building Python objects). The `traceEvents` array is
decoded a slice (~4 MB of JSON) at a time, and each slice's events are split by role and
moved into compact columns before the next slice is decoded, so only one slice of Structs
is ever alive (a Struct per event costs ~2x its JSON text). Repeated strings (names,
thread ids, shapes) are interned so the columns share one str object per distinct value.

Roles, by the event's `cat` (case-insensitive, covering old and new Kineto spellings):
ops (cpu_op, operator, user_annotation), runtime calls that carry the `correlation` id
of the device work they launch (cuda_runtime, cuda_driver, runtime, mtia_runtime, ...),
device activities (kernel, gpu_memcpy, gpu_memset and MTIA's mtia_ccp_events), and
python_function events (module scopes `nn.Module: Name_N`). Everything else (flows,
instant events, metadata, gpu_user_annotation, cuda_sync) is ignored.
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass, field, fields
from typing import Any, Iterator, Optional, Union

import msgspec
import numpy as np

from porter.core.factorize import factorize

IntOrStr = Union[int, str, None]


SCALAR_TYPE_BYTES = {"Float": 4, "Double": 8, "Half": 2, "BFloat16": 2, "Long": 8, "Int": 4, "Short": 2,
                     "Char": 1, "Byte": 1, "Bool": 1, "Float8_e4m3fn": 1, "Float8_e5m2": 1}  # c10 ScalarType


def _msg_bytes(a: Optional["Args"]) -> Optional[float]:
    if a is None or isinstance(a.msg_nelems, (str, type(None))):
        return None
    return a.msg_nelems * SCALAR_TYPE_BYTES.get(str(a.dtype), np.nan)


class Args(msgspec.Struct, gc=False):
    correlation: IntOrStr = None
    device: IntOrStr = None
    stream: IntOrStr = None
    flops: Optional[float] = None
    input_dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Input type")
    concrete_inputs: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Concrete Inputs")
    module_hierarchy: Optional[str] = msgspec.field(default=None, name="Module Hierarchy")
    msg_nelems: Union[float, str, None] = msgspec.field(default=None, name="In msg nelems")  # record_param_comms
    dtype: IntOrStr = None  # record_param_comms: the message's c10 ScalarType name


class Event(msgspec.Struct, gc=False):
    cat: Optional[str] = None
    name: Optional[str] = None
    pid: IntOrStr = None
    tid: IntOrStr = None
    ts: Optional[float] = None
    dur: Optional[float] = None
    args: Optional[Args] = None


class Document(msgspec.Struct):
    """Top level of a Kineto trace; unnamed keys are skipped."""

    traceEvents: msgspec.Raw  # a view into the document's bytes, decoded slice by slice (events())
    deviceProperties: Any = None
    metadata: Any = None
    distributedInfo: Any = None
    traceName: Any = None
    schemaVersion: Any = None
    cupti_version: Any = None
    cuda_runtime_version: Any = None
    cuda_driver_version: Any = None
    roctracer_version: Any = None
    hip_runtime_version: Any = None
    hip_driver_version: Any = None


_CAT, _NAME, _PID, _TID, _TS, _DUR = (operator.attrgetter(f) for f in ("cat", "name", "pid", "tid", "ts", "dur"))
_DECODER = msgspec.json.Decoder(Document)
_EVENTS = msgspec.json.Decoder(list[Event])
SLICE_BYTES = 4 << 20
_MAX_CUT_TRIES = 8

OP, RUNTIME, KERNEL, MEMCPY, MEMSET, MTIA_DEVICE, PYTHON = range(1, 8)
_ROLE_OF_CAT = {
    "cpu_op": OP,
    "operator": OP,
    "user_annotation": OP,
    "cuda_runtime": RUNTIME,
    "cuda_driver": RUNTIME,
    "runtime": RUNTIME,
    "driver": RUNTIME,
    "mtia_runtime": RUNTIME,
    "xpu_runtime": RUNTIME,
    "xpu_driver": RUNTIME,
    "privateuse1_runtime": RUNTIME,
    "privateuse1_driver": RUNTIME,
    "kernel": KERNEL,
    "gpu_memcpy": MEMCPY,
    "memcpy": MEMCPY,
    "gpu_memset": MEMSET,
    "memset": MEMSET,
    "mtia_ccp_events": MTIA_DEVICE,
    "python_function": PYTHON,
}
ANNOTATION_CATS = frozenset({"user_annotation"})
# MTIA command-processor records that mark stream synchronisation, not device work.
MTIA_SYNC_NAMES = frozenset({"event_wait", "event_record"})
NN_MODULE = "nn.Module: "


def decode(data: bytes) -> Document:
    """Parse the top level; `traceEvents` stays raw (msgspec errors propagate for the caller to word)."""
    return _DECODER.decode(data)


def _next_cut(view: memoryview, pos: int, end: int) -> int:
    """Position of the first `},` at or after `pos` (the comma's index), or `end` when none."""
    while pos < end:
        hit = bytes(view[pos : min(pos + (1 << 16), end)]).find(b"},")
        if hit >= 0:
            return pos + hit + 1
        pos += (1 << 16) - 1  # keep one byte of overlap: a `},` may straddle two windows
    return end


def _in_document(exc: msgspec.ValidationError, offset: int) -> msgspec.ValidationError:
    """A slice's error, with its path (`$[i]...`) rewritten as the document's (`$.traceEvents[offset+i]...`)."""
    text = re.sub(r"`\$\[(\d+)\]", lambda m: f"`$.traceEvents[{offset + int(m.group(1))}]", str(exc))
    if "- at `$" not in text:  # msgspec leaves the top level's path out
        text += " - at `$.traceEvents`"
    return msgspec.ValidationError(text)


def events(raw: msgspec.Raw, slice_bytes: int = SLICE_BYTES) -> Iterator[list[Event]]:
    """The events of the raw `traceEvents` array, in slices of about `slice_bytes` of JSON.

    A slice ends at a `},` found by a byte search. That is only a guess (it may close a
    nested object or sit inside a string), but a wrong guess always leaves the slice
    invalid JSON (it ends inside an event), so decoding checks it: a DecodeError moves the
    cut to the next candidate; after a few misses the rest is decoded in one piece, which
    also reports real syntax errors as they are. Yields at least one (maybe empty) list."""
    view = memoryview(raw)
    end = len(view) - 1  # index of the closing `]`
    if end < 1 or view[0] != ord("[") or view[end] != ord("]"):
        try:
            yield _EVENTS.decode(raw)  # not an array: let msgspec word the error
        except msgspec.ValidationError as exc:
            raise _in_document(exc, 0) from None
        return
    start, seen = 1, 0
    while True:
        cut, tries = _next_cut(view, start + slice_bytes, end), 0
        while True:
            try:
                part = _EVENTS.decode(b"".join((b"[", view[start:cut], b"]")))
                break
            except msgspec.ValidationError as exc:
                raise _in_document(exc, seen) from None
            except msgspec.DecodeError:
                tries += 1
                if cut >= end:
                    raise
                cut = end if tries >= _MAX_CUT_TRIES else _next_cut(view, cut + 1, end)
        seen += len(part)
        yield part
        del part  # not alive while the next slice decodes
        if cut >= end:
            return
        start = cut + 1


class Interner:
    """Maps values to one shared object per distinct value, across slices: a column of
    1M op names then costs 8 bytes a row plus its few hundred distinct strs, not a str
    object per row (msgspec makes a new str for every string value it decodes)."""

    def __init__(self, missing: Any):
        self._pool: dict[Any, Any] = {None: missing}  # None becomes `missing`

    def __call__(self, values: list) -> np.ndarray:
        """Object array of `values` (None becomes `missing`) made of pooled objects: one
        dict.setdefault per value, in C (map), ~3x cheaper than coding them first."""
        pool = self._pool
        return np.fromiter(map(pool.setdefault, values, values), dtype=object, count=len(values))


_SEP = b"\x1e"  # ASCII record separator: never inside JSON text Kineto writes


def raw_texts(raws: list[msgspec.Raw]) -> list[str]:
    """Raw JSON fragments as str ("" for absent or null), joined and split once in C
    rather than decoded one by one."""
    if not raws:
        return []
    texts = _SEP.join(raws).decode("utf-8", "replace").split("\x1e")
    if len(texts) != len(raws):  # a separator inside a string value: fall back to one by one
        texts = [bytes(r).decode("utf-8", "replace") for r in raws]
    return ["" if t == "null" else t for t in texts]


@dataclass
class Columns:
    """Fields of one role's events, aligned by position. The optional fields are filled
    only for the roles that use them (None otherwise)."""

    name: np.ndarray  # object: str, "" when missing
    pid: np.ndarray  # object: int, str or None
    tid: np.ndarray
    ts: np.ndarray  # float64
    dur: np.ndarray  # float64, floored at 0
    cat: Optional[np.ndarray] = None  # ops: to tell annotations apart
    correlation: Optional[np.ndarray] = None  # int64, -1 when missing: runtime calls, device rows
    device: Optional[np.ndarray] = None  # int64 device id: device rows
    stream: Optional[np.ndarray] = None  # int64: device rows
    flops: Optional[np.ndarray] = None  # float64, NaN when unknown: ops
    input_dims: Optional[np.ndarray] = None  # object str, raw JSON text, "" when absent: ops
    input_type: Optional[np.ndarray] = None
    concrete_inputs: Optional[np.ndarray] = None
    hierarchy: Optional[np.ndarray] = None  # object str, `Module Hierarchy` arg, "": ops
    msg_bytes: Optional[np.ndarray] = None  # float64: a record_param_comms message's bytes, NaN else: ops

    def __len__(self) -> int:
        return len(self.ts)


def take(cols: Columns, idx: np.ndarray) -> Columns:
    """The rows of `cols` at positions `idx`, in that order."""
    ix = np.asarray(idx, dtype=np.int64)
    return Columns(**{f.name: None if (v := getattr(cols, f.name)) is None else v[ix] for f in fields(Columns)})


def concat(parts: list[Columns]) -> Columns:
    """The rows of all parts (at least one, all of one role), in order. Empties `parts`
    and joins one field at a time, freeing that field's pieces before the next, so the
    join never holds two copies of every column (that was the read's peak)."""
    if len(parts) == 1:
        return parts.pop()
    pieces = {f.name: [getattr(p, f.name) for p in parts] for f in fields(Columns)}
    parts.clear()
    out = {}
    for name in list(pieces):
        vals = pieces.pop(name)
        out[name] = None if vals[0] is None else np.concatenate(vals)
        del vals
    return Columns(**out)


@dataclass
class Split:
    """A trace's events grouped by role, only those with a start time and a duration."""

    ops: Columns
    runtime: Columns
    device: Columns
    device_kind: np.ndarray  # "kernel" / "memcpy" / "memset" per device row
    modules: Columns  # python_function events that are nn.Module scopes
    categories: list[str] = field(default_factory=list)
    events_read: int = 0
    negative_durations: int = 0  # events whose negative `dur` was floored at 0


def _floats(values: list[Optional[float]]) -> np.ndarray:
    return np.array(values, dtype=np.float64)  # None becomes NaN


class _Slicer:
    """Turns each decoded slice into per-role Columns, sharing interned strings across slices."""

    def __init__(self) -> None:
        self.strings = Interner("")
        self.ids = Interner(None)
        self.categories: dict[str, None] = {}
        self.negative_durations = 0

    def _timed(self, sub: list[Event]) -> tuple[list[Event], Columns]:
        """The events with a finite start and duration, and their common columns."""
        ts = _floats(list(map(_TS, sub)))  # attrgetter through map: the field pulls run in C
        dur = _floats(list(map(_DUR, sub)))
        keep = np.isfinite(ts) & np.isfinite(dur)
        if not keep.all():
            sub = [e for e, k in zip(sub, keep.tolist()) if k]
            ts, dur = ts[keep], dur[keep]
        self.negative_durations += int(np.count_nonzero(dur < 0))
        cols = Columns(
            name=self.strings(list(map(_NAME, sub))), pid=self.ids(list(map(_PID, sub))),
            tid=self.ids(list(map(_TID, sub))), ts=ts, dur=np.maximum(dur, 0.0),
        )
        return sub, cols

    def ops(self, sub: list[Event]) -> Columns:
        sub, cols = self._timed(sub)
        args = [e.args for e in sub]
        empty = msgspec.Raw()
        cols.cat = self.strings([e.cat for e in sub])
        cols.flops = _floats([None if a is None else a.flops for a in args])
        for name in ("input_dims", "input_type", "concrete_inputs"):
            texts = raw_texts([empty if a is None else getattr(a, name) for a in args])
            setattr(cols, name, self.strings(texts))
        cols.hierarchy = self.strings([None if a is None else a.module_hierarchy for a in args])
        cols.msg_bytes = _floats([_msg_bytes(a) for a in args])
        return cols

    def runtime(self, sub: list[Event]) -> Columns:
        sub, cols = self._timed(sub)
        cols.correlation = ints([None if e.args is None else e.args.correlation for e in sub])
        return cols

    def device(self, sub: list[Event]) -> tuple[Columns, np.ndarray]:
        """Device rows that are work (not MTIA sync records), and their kind."""
        sub, cols = self._timed(sub)
        kind = np.array([_device_kind(e.cat, e.name) for e in sub], dtype=object)
        work = np.flatnonzero(kind != "")
        if len(work) < len(sub):
            sub = [sub[i] for i in work.tolist()]
            cols, kind = take(cols, work), kind[work]
        args = [e.args for e in sub]
        cols.correlation = ints([None if a is None else a.correlation for a in args])
        cols.device = ints([None if a is None else a.device for a in args])
        cols.stream = ints([None if a is None else a.stream for a in args])
        return cols, kind

    def split(self, events: list[Event]) -> Split:
        """One slice's events by role; python_function events only when they are module scopes."""
        cats = list(map(_CAT, events))
        role_of = dict.fromkeys(cats)  # the distinct categories, first seen first
        for c in role_of:
            role_of[c] = _ROLE_OF_CAT.get(c.lower(), 0) if isinstance(c, str) else 0
        self.categories.update((c, None) for c in role_of if isinstance(c, str))
        roles = np.fromiter(map(role_of.__getitem__, cats), dtype=np.int8, count=len(cats))

        def pick(*wanted: int) -> list[Event]:
            return list(map(events.__getitem__, np.flatnonzero(np.isin(roles, wanted)).tolist()))

        scopes = [e for e in pick(PYTHON) if e.name is not None and e.name.startswith(NN_MODULE)]
        device, kind = self.device(pick(KERNEL, MEMCPY, MEMSET, MTIA_DEVICE))
        return Split(ops=self.ops(pick(OP)), runtime=self.runtime(pick(RUNTIME)), device=device,
                     device_kind=kind, modules=self._timed(scopes)[1], events_read=len(events))


def split(doc: Document, slice_bytes: int = SLICE_BYTES) -> Split:
    """Decode `doc.traceEvents` slice by slice and group the events by role.

    Consumes `doc.traceEvents` (left an empty Raw): it was the last reference to the
    document's JSON bytes, which are freed before the slices' columns are joined, so the
    bytes and two copies of the columns are never alive together."""
    slicer = _Slicer()
    ops, runtime, device, kind, modules, n = [], [], [], [], [], 0
    for part in events(doc.traceEvents, slice_bytes):
        got = slicer.split(part)
        del part  # the slice's Structs go before the next slice is decoded
        ops.append(got.ops)
        runtime.append(got.runtime)
        device.append(got.device)
        kind.append(got.device_kind)
        modules.append(got.modules)
        n += got.events_read
    doc.traceEvents = msgspec.Raw()
    return Split(ops=concat(ops), runtime=concat(runtime), device=concat(device),
                 device_kind=np.concatenate(kind), modules=concat(modules),
                 categories=list(slicer.categories), events_read=n, negative_durations=slicer.negative_durations)


def _device_kind(cat: str, name: Optional[str]) -> str:
    role = _ROLE_OF_CAT.get(cat.lower(), 0)
    if role == MEMCPY:
        return "memcpy"
    if role == MEMSET:
        return "memset"
    if role == MTIA_DEVICE:
        if name in MTIA_SYNC_NAMES:
            return ""
        return "memcpy" if name is not None and name.startswith("dma") else "kernel"
    return "kernel"


def is_category(cats: list[str], wanted: frozenset[str]) -> np.ndarray:
    """Per event, whether its category (any case) is in `wanted`."""
    codes, uniques = factorize(np.array(cats, dtype=object))
    hit = np.array([isinstance(c, str) and c.lower() in wanted for c in uniques] + [False], dtype=bool)
    return hit[codes]


def ints(values: list[IntOrStr]) -> np.ndarray:
    """int64 array of ids written as ints (or, on MTIA, numeric strings); -1 where missing."""
    try:
        arr = np.array(values, dtype=np.float64)  # None -> NaN; "108" -> 108.0
    except (TypeError, ValueError):
        return np.array([as_int(v) for v in values], dtype=np.int64)
    if not np.isfinite(arr).all() or np.abs(arr).max(initial=0) >= 2**53 or (arr != np.floor(arr)).any():
        return np.array([as_int(v) for v in values], dtype=np.int64)
    return arr.astype(np.int64)


def as_int(value: IntOrStr, default: int = -1) -> int:
    """Kineto writes some ids as strings (MTIA stream_id "108"); anything else, or an id
    outside int64, is `default`."""
    if isinstance(value, str):
        try:
            value = int(value) if len(value) <= 20 else default
        except ValueError:
            return default
    if type(value) is int and -(2**63) <= value < 2**63:
        return value
    return default
