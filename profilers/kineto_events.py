"""Decode a Kineto (PyTorch profiler) JSON document into per-role numpy columns.

Speed matters here: traces run to 100k+ events and tens of MB. msgspec decodes straight
into slotted Structs that name only the fields porter uses (everything else in `args`,
flow events' ids, stacks, memory counters, is skipped by the parser without building
Python objects). Events are then split by role with one pass over their categories, and
each role's fields are pulled out only for that role's events.

Roles, by the event's `cat` (case-insensitive, covering old and new Kineto spellings):
ops (cpu_op, operator, user_annotation), runtime calls that carry the `correlation` id
of the device work they launch (cuda_runtime, cuda_driver, runtime, mtia_runtime, ...),
device activities (kernel, gpu_memcpy, gpu_memset and MTIA's mtia_ccp_events), and
python_function events (module scopes `nn.Module: Name_N`). Everything else (flows,
instant events, metadata, gpu_user_annotation, cuda_sync) is ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Union

import msgspec
import numpy as np
import pandas as pd

IntOrStr = Union[int, str, None]


class Args(msgspec.Struct, gc=False):
    correlation: IntOrStr = None
    device: IntOrStr = None
    stream: IntOrStr = None
    flops: Optional[float] = None
    input_dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Input type")
    concrete_inputs: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Concrete Inputs")
    module_hierarchy: Optional[str] = msgspec.field(default=None, name="Module Hierarchy")


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

    traceEvents: list[Event]
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


_DECODER = msgspec.json.Decoder(Document)

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


def decode(data: bytes) -> Document:
    """Parse the JSON document (msgspec errors propagate for the caller to word)."""
    return _DECODER.decode(data)


@dataclass
class Columns:
    """Fields of one role's events, aligned by position."""

    name: list[str]
    cat: list[str]
    pid: list[IntOrStr]
    tid: list[IntOrStr]
    ts: np.ndarray
    dur: np.ndarray
    args: list[Optional[Args]]

    def __len__(self) -> int:
        return len(self.name)


@dataclass
class Split:
    """A trace's events grouped by role, only those with a start time and a duration."""

    ops: Columns
    runtime: Columns
    device: Columns
    device_kind: np.ndarray  # "kernel" / "memcpy" / "memset" per device row
    modules: Columns  # python_function events that are nn.Module scopes
    categories: list[str] = field(default_factory=list)


def _floats(values: list[Optional[float]]) -> np.ndarray:
    return np.array(values, dtype=np.float64)  # None becomes NaN


def _columns(events: list[Event], idx: np.ndarray) -> Columns:
    sub = [events[i] for i in idx.tolist()]
    ts = _floats([e.ts for e in sub])
    dur = _floats([e.dur for e in sub])
    keep = np.isfinite(ts) & np.isfinite(dur)
    if not keep.all():
        sub = [e for e, k in zip(sub, keep.tolist()) if k]
        ts, dur = ts[keep], dur[keep]
    names = [e.name for e in sub]
    if None in names:
        names = [n if isinstance(n, str) else "" for n in names]
    return Columns(
        name=names,
        cat=[e.cat for e in sub],
        pid=[e.pid for e in sub],
        tid=[e.tid for e in sub],
        ts=ts,
        dur=np.maximum(dur, 0.0),
        args=[e.args for e in sub],
    )


def split(events: list[Event]) -> Split:
    """Group events by role; python_function events are kept only when they are module scopes."""
    codes, cats = pd.factorize(pd.Series([e.cat for e in events], dtype=object), use_na_sentinel=True)
    role_of_code = np.array(
        [_ROLE_OF_CAT.get(c.lower(), 0) if isinstance(c, str) else 0 for c in cats] + [0], dtype=np.int8
    )
    roles = role_of_code[codes]  # code -1 (missing cat) picks the trailing 0

    def pick(*wanted: int) -> np.ndarray:
        return np.flatnonzero(np.isin(roles, wanted))

    py_idx = pick(PYTHON)
    py_list = py_idx.tolist()
    py_names = [events[i].name for i in py_list]
    scope_idx = np.array(
        [i for i, n in zip(py_list, py_names) if n is not None and n.startswith("nn.Module: ")], dtype=np.int64
    )
    device = _columns(events, pick(KERNEL, MEMCPY, MEMSET, MTIA_DEVICE))
    kind = np.array([_device_kind(c, n) for c, n in zip(device.cat, device.name)], dtype=object)
    work = kind != ""
    if not work.all():
        device = take(device, np.flatnonzero(work))
        kind = kind[work]
    return Split(
        ops=_columns(events, pick(OP)),
        runtime=_columns(events, pick(RUNTIME)),
        device=device,
        device_kind=kind,
        modules=_columns(events, scope_idx),
        categories=[c for c in cats if isinstance(c, str)],
    )


def _device_kind(cat: str, name: str) -> str:
    role = _ROLE_OF_CAT.get(cat.lower(), 0)
    if role == MEMCPY:
        return "memcpy"
    if role == MEMSET:
        return "memset"
    if role == MTIA_DEVICE:
        if name in MTIA_SYNC_NAMES:
            return ""
        return "memcpy" if name.startswith("dma") else "kernel"
    return "kernel"


def take(cols: Columns, idx: np.ndarray) -> Columns:
    """The rows of `cols` at positions `idx`, in that order."""
    ix = np.asarray(idx, dtype=np.int64).tolist()
    return Columns(
        name=[cols.name[i] for i in ix], cat=[cols.cat[i] for i in ix],
        pid=[cols.pid[i] for i in ix], tid=[cols.tid[i] for i in ix],
        ts=cols.ts[ix], dur=cols.dur[ix], args=[cols.args[i] for i in ix],
    )


def is_category(cats: list[str], wanted: frozenset[str]) -> np.ndarray:
    """Per event, whether its category (any case) is in `wanted`."""
    codes, uniques = pd.factorize(np.array(cats, dtype=object))
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
    """Kineto writes some ids as strings (MTIA stream_id "108"); anything else is `default`."""
    if type(value) is int:
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return default
    return default
