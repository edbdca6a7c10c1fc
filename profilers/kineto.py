"""PyTorch profiler (Kineto) JSON reader: `.json` and `.json.gz` from CUDA (CUPTI), ROCm
(roctracer), MTIA and CPU-only runs.

How a trace becomes the common schema:

* ops: every `cpu_op` and `user_annotation` range, except `ProfilerStep#N` (steps) and
  `porter.module:<path>` (module scopes). An op's parent is the innermost op open at its
  start on the same thread.
* kernels: `kernel`, `gpu_memcpy`, `gpu_memset` events and MTIA's `mtia_ccp_events`
  (`dma_*` count as memcpy; `event_wait` / `event_record` mark stream synchronisation, not
  work, and are left out). Whether an event is device work comes from its category, never
  from its stream id (ROCm kernels sit on stream 0). Each is linked through its
  `correlation` arg to the runtime call carrying the same id (`cuda_runtime`,
  `cuda_driver`, `mtia_runtime`; ROCm's hip* calls are `cuda_runtime` too), and its time
  goes to the innermost op open on that thread when the call began: `device_us` is self
  device time. Flow events (`ac2g`, older `async_cpu_to_gpu`) carry the same ids and are
  not needed.
* Device work no op launched (launched before the profiler started, or from a thread
  without ops) gets one synthetic op per launching runtime call, or per kernel when the
  call is missing, named like its first kernel and classed from the kernel name.
* module: the innermost `porter.module:<path>` user annotation around the op. That is a
  porter convention: capture code wraps each module call in
  `record_function("porter.module:blocks.0/attn")` and `<path>` is the whole module path,
  already "/"-joined. Without one, the chain of `nn.Module: Name_N` python_function scopes
  open around the op on its thread, outermost first ("BertModel_0/BertEncoder_0/
  BertLayer_1/BertAttention_0"); else the op's `Module Hierarchy` arg; else "".
* step: the `ProfilerStep#N` range around the op's start (any thread), -1 outside.
* CPU-only traces (no device activity at all): the CPU is the device. An op's device time
  is its self CPU time (its duration minus its child ops' durations, floored at 0), and
  each op gets one kernels row (kind "kernel", named like the op, stream -1), so
  sum(ops.device_us) == sum(kernels.dur_us) holds and a CPU run can be compared with
  another stack op by op. device_type is then "cpu".
"""

from __future__ import annotations

import zlib
from pathlib import Path

import msgspec
import numpy as np

from porter.core.errors import TraceFormatError
from porter.core.run import job_rank
from profilers.base import GZIP_MAGIC, ReadResult, read_bytes
from profilers.intervals import Nesting
from profilers.kineto_events import ANNOTATION_CATS, Columns, Document, Split, decode, is_category, split, take
from profilers.kineto_link import DeviceRows, cpu_as_device, link_device
from profilers.kineto_meta import device_type, trace_meta
from profilers.kineto_ops import (
    distinct_names, first_stream, module_from_hierarchy, op_classes, op_table_columns,
)
from profilers.kineto_scopes import Clock, Scopes, make_clock, separate_markers, step_spans, steps_at

FORMAT = "kineto"

_SNIFF_LIMIT = 1 << 20


def _scan_for(path: Path, needle: bytes, limit: int = _SNIFF_LIMIT) -> bool:
    """Whether `needle` occurs in the first `limit` (decompressed) bytes of the file."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(limit)
    except OSError:
        return False
    if raw[:2] == GZIP_MAGIC:
        try:
            raw = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw, limit)
        except zlib.error:
            return False
    return needle in raw


def sniff(path: Path, head: bytes) -> bool:
    """A JSON object holding "traceEvents" (not ONNX Runtime's event list, not rocprofv3)."""
    if not head.lstrip().startswith(b"{") or b'"rocprofiler-sdk-tool"' in head:
        return False
    if b'"traceEvents"' in head:
        return True
    # Recorders that add a big "metadata" block push the events past the head.
    return _scan_for(Path(path), b'"traceEvents"')


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())[:200]


def _load(path: Path) -> tuple[Document, Split]:
    """The document's top level and its events by role. The JSON bytes are freed once
    the events are columns (split consumes the Raw `traceEvents`, their last reference),
    so they are not alive while the tables are built."""
    try:
        doc = decode(read_bytes(path))
        parts = split(doc)
    except msgspec.ValidationError as exc:  # valid JSON, wrong shape (a DecodeError subclass)
        raise TraceFormatError(f"not a Kineto trace ({_one_line(exc)})", path=path) from None
    except msgspec.DecodeError as exc:
        raise TraceFormatError(f"invalid JSON ({_one_line(exc)})", path=path) from None
    except RecursionError:
        raise TraceFormatError("invalid JSON (nested too deeply)", path=path) from None
    return doc, parts


def _attribute(clock: Clock, scopes: Scopes, ops: Columns, runtime: Columns, device: Columns,
               device_kind: np.ndarray) -> tuple[np.ndarray, DeviceRows]:
    """Each op's parent op, and the device rows with the ops they belong to. The op
    nesting's sparse table (~log2(n) arrays of n floats: 40 MB at 270k ops) lives only
    inside this call, not while the tables are built."""
    op_key = clock.key(ops)
    op_nest = Nesting(op_key, op_key + ops.dur)
    op_parent = op_nest.parents()
    if len(device):
        return op_parent, link_device(clock, scopes, op_nest, len(ops), runtime, device, device_kind)
    return op_parent, cpu_as_device(ops, clock.rel(ops), op_parent)  # CPU-only: the CPU is the device


def read(path: Path) -> ReadResult:
    """Read a Kineto trace into the common schema (see the module docstring for the rules)."""
    path = Path(path)
    doc, parts = _load(path)
    markers = separate_markers(parts.ops)
    ops, runtime, modules = markers.ops, parts.runtime, parts.modules
    by_start = np.argsort(parts.device.ts, kind="stable")
    device, device_kind = take(parts.device, by_start), parts.device_kind[by_start]
    categories, events_read, negative = parts.categories, parts.events_read, parts.negative_durations
    del parts, by_start  # the unsorted op and device columns, copied into markers and device
    if len(ops) == 0 and len(device) == 0:
        raise TraceFormatError("no ops or device activity with durations (empty trace)", path=path)
    clock = make_clock(path, [ops, runtime, modules, markers.scopes], [device, markers.steps])
    scopes = Scopes(clock, markers.scopes, modules)
    op_parent, rows = _attribute(clock, scopes, ops, runtime, device, device_kind)
    op_start = clock.rel(ops)

    n_syn = len(rows.synthetic_names)
    n_all = len(ops) + n_syn
    is_annotation = np.append(is_category(ops.cat, ANNOTATION_CATS), np.zeros(n_syn, dtype=bool))
    names = np.concatenate([ops.name, np.array(rows.synthetic_names, dtype=object)])
    framework_op = names.copy()
    framework_op[is_annotation] = ""
    framework_op[len(ops):] = ""
    step = steps_at(markers, clock, np.concatenate([op_start, rows.synthetic_start]))
    dtype = device_type(doc, categories, list(runtime.name[:64]), has_device_work=len(device) > 0)
    meta = trace_meta(doc, dtype, events_read, _extra(rows, len(ops), cpu=len(device) == 0))
    meta.extra["clock_origin_us"] = clock.t0  # the raw clock of time 0: ranks of one host share it
    meta.extra["steps"] = step_spans(markers, clock)
    if negative:  # the rest of the trace is sound: keep it, and say what was changed
        meta.extra["warnings"] = [f"{negative} events with a negative duration were counted as 0 us"]
    kernel_names = distinct_names(rows.op, rows.name, n_all)
    ops_table = {
        "op_id": np.arange(n_all, dtype=np.int64),
        "parent_id": np.concatenate([op_parent, np.full(n_syn, -1, dtype=np.int64)]),
        "step": step,
        "name": names,
        "framework_op": framework_op,
        "op_class": op_classes(np.where(is_annotation, names, framework_op), kernel_names),
        "module": np.concatenate([module_from_hierarchy(scopes.at(clock.key(ops)), ops.hierarchy), rows.synthetic_module]),
        "start_us": np.concatenate([op_start, rows.synthetic_start]),
        "host_us": np.concatenate([ops.dur, rows.synthetic_host]),
        "device_us": np.bincount(rows.op, weights=rows.dur, minlength=n_all),
        "kernel_count": np.bincount(rows.op, minlength=n_all).astype(np.int64),
        "kernels": kernel_names,
        "stream": first_stream(rows.op, rows.stream, n_all),
        "synthetic": np.arange(n_all) >= len(ops),
        **op_table_columns(ops, n_syn),
        # One shared str per row, as object columns (porter.core.columns.to_frame keeps them so).
        "device_type": np.full(n_all, meta.device_type, dtype=object),
        "device_name": np.full(n_all, meta.device_name, dtype=object),
    }
    kernels = {
        "op_id": rows.op, "step": step[rows.op], "name": rows.name, "kind": rows.kind,
        "device_id": rows.device_id, "stream": rows.stream, "start_us": rows.start,
        "dur_us": rows.dur, "correlation": rows.correlation,
    }
    rank = job_rank(meta.extra)  # one rank of a multi-rank job: every row says which (else the column is -1)
    if rank is not None:
        ops_table["rank"] = np.full(n_all, rank, dtype=np.int64)
        kernels["rank"] = np.full(len(rows.op), rank, dtype=np.int64)
    return ReadResult(ops_table, kernels, meta)


def _extra(rows: DeviceRows, n_ops: int, cpu: bool) -> dict:
    total = float(rows.dur.sum())
    synthetic_time = float(rows.dur[rows.op >= n_ops].sum())
    return {
        "cpu_as_device": cpu,
        "synthetic_ops": len(rows.synthetic_names),
        "linked_device_share": round(1.0 - synthetic_time / total, 6) if total > 0 else 1.0,
    }
