"""rocprofv3 JSON (rocprofiler-sdk tool output, `rocprofv3 --output-format json`).

The file holds kernel dispatch, memory copy and runtime API records (nanosecond
timestamps), plus the tables that name them: kernel symbols, agents, and the
kind/operation strings. There are no framework ops, so each device activity becomes one
kernels row and one op row of its own (name = kernel name, op_class from the kernel
name). When the HIP API call that launched it was traced (same internal correlation id),
the op starts at that call and its host time is the call's duration; otherwise the op is
marked synthetic (no launching op was recorded) and starts with its kernel.

Kernel `stream` is the HSA queue handle (the HIP stream id is 0 unless HIP stream tracing
was on); `device_id` is the agent's GPU index.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from porter.core.errors import TraceFormatError
from porter.core.opclass import classify_kernel
from profilers.base import ReadResult, TraceMeta

if TYPE_CHECKING:  # loaded by read(): sniffing a file (every command that opens one) needs no pandas
    import pandas as pd
from profilers.jsonio import load_json, mapping, number, sequence

FORMAT = "rocprofv3"
TOOL_KEY = "rocprofiler-sdk-tool"
GPU_AGENT_TYPE = 2  # ROCPROFILER_AGENT_TYPE_GPU
AGENT_PROPERTIES = ("name", "product_name", "cu_count", "simd_count", "wave_front_size",
                    "gfx_target_version", "num_xcc", "max_engine_clk_fcompute")


def sniff(path: Path, head: bytes) -> bool:
    return f'"{TOOL_KEY}"'.encode() in head


@dataclass(frozen=True)
class Activity:
    """One device activity (kernel dispatch or memory copy) in nanoseconds."""

    kind: str  # "kernel" or "memcpy"
    name: str
    agent: int  # agent handle
    queue: int
    start_ns: float
    end_ns: float
    correlation: int  # internal correlation id, unique within its process
    bytes: float


@dataclass(frozen=True)
class ApiCall:
    name: str
    start_ns: float
    end_ns: float


def _get(rec: Any, dotted: str, path: Path) -> Any:
    """rec["a"]["b"]... for dotted "a.b", TraceFormatError when a level is missing."""
    value = rec
    for key in dotted.split("."):
        if not isinstance(value, dict) or key not in value:
            raise TraceFormatError(f"record lacks {dotted!r}", path=path)
        value = value[key]
    return value


def _num(rec: Any, dotted: str, path: Path) -> float:
    return number(_get(rec, dotted, path), dotted, path)


def _id(rec: Any, dotted: str, path: Path) -> int:
    """An integer id that fits the schema's int64 columns."""
    value = _num(rec, dotted, path)
    if not -(2**63) <= value < 2**63:
        raise TraceFormatError(f"field {dotted!r} = {value} does not fit a 64-bit id", path=path)
    return int(value)


def _interval(rec: Any, path: Path) -> tuple[float, float]:
    start, end = _num(rec, "start_timestamp", path), _num(rec, "end_timestamp", path)
    if end < start:
        raise TraceFormatError(f"record ends before it starts ({start} > {end} ns)", path=path)
    return start, end


def kernel_names(proc: dict, path: Path) -> dict[int, str]:
    """kernel_id -> readable kernel name (formatted/demangled, without the `.kd` suffix)."""
    names: dict[int, str] = {}
    for sym in sequence(proc.get("kernel_symbols", []), "kernel_symbols", path):
        sym = mapping(sym, "kernel_symbols[]", path)
        kid = _id(sym, "kernel_id", path)
        for key in ("formatted_kernel_name", "demangled_kernel_name", "truncated_kernel_name", "kernel_name"):
            name = sym.get(key)
            if isinstance(name, str) and name:
                names[kid] = name.removesuffix(".kd")
                break
    return names


def operation_names(proc: dict, path: Path) -> dict[str, list[str]]:
    """Buffer record kind -> its operation names (index = record["operation"])."""
    table = mapping(proc.get("strings", {}), "strings", path)
    out: dict[str, list[str]] = {}
    for entry in sequence(table.get("buffer_records", []), "strings.buffer_records", path):
        if isinstance(entry, dict) and isinstance(entry.get("kind"), str) and isinstance(entry.get("operations"), list):
            out[entry["kind"]] = [str(op) for op in entry["operations"]]
    return out


def _op_name(ops: dict[str, list[str]], kind: str, rec: dict, path: Path) -> str:
    idx = _id(rec, "operation", path)
    names = ops.get(kind, [])
    return names[idx] if 0 <= idx < len(names) else f"{kind}#{idx}"


def _records(proc: dict, kind: str, path: Path) -> list[dict]:
    buffers = mapping(proc.get("buffer_records", {}), "buffer_records", path)
    recs = sequence(buffers.get(kind, []), f"buffer_records.{kind}", path)
    return [mapping(r, f"buffer_records.{kind}[]", path) for r in recs]


def api_calls(proc: dict, ops: dict[str, list[str]], path: Path) -> dict[int, ApiCall]:
    """HIP runtime API calls by internal correlation id (the launch of a dispatch or copy)."""
    calls: dict[int, ApiCall] = {}
    for rec in _records(proc, "hip_api", path):
        start, end = _interval(rec, path)
        corr = _id(rec, "correlation_id.internal", path)
        calls[corr] = ApiCall(_op_name(ops, "HIP_RUNTIME_API", rec, path), start, end)
    return calls


_INT64 = 2**63


def _dispatch_fields(rec: dict, path: Path) -> tuple[int, ...]:
    """(start, end, kernel_id, agent, queue, correlation) of a dispatch record.

    The plain lookups are the fast path for well-formed records; anything unusual goes
    through the checked lookups, which name the bad field.
    """
    try:
        info = rec["dispatch_info"]
        vals = (rec["start_timestamp"], rec["end_timestamp"], info["kernel_id"], info["agent_id"]["handle"],
                info["queue_id"]["handle"], rec["correlation_id"]["internal"])
        if all(type(v) is int and 0 <= v < _INT64 for v in vals) and vals[1] >= vals[0]:
            return vals
    except (KeyError, TypeError):
        pass
    start, end = _interval(rec, path)
    return (start, end, _id(rec, "dispatch_info.kernel_id", path), _id(rec, "dispatch_info.agent_id.handle", path),
            _id(rec, "dispatch_info.queue_id.handle", path), _id(rec, "correlation_id.internal", path))


def dispatches(proc: dict, names: dict[int, str], path: Path) -> list[Activity]:
    out = []
    for rec in _records(proc, "kernel_dispatch", path):
        start, end, kid, agent, queue, corr = _dispatch_fields(rec, path)
        out.append(Activity("kernel", names.get(kid, f"kernel_{kid}"), agent, queue, start, end, corr, float("nan")))
    return out


def memory_copies(proc: dict, ops: dict[str, list[str]], agents: dict[int, dict], path: Path) -> list[Activity]:
    out = []
    for rec in _records(proc, "memory_copy", path):
        start, end = _interval(rec, path)
        src = _id(rec, "src_agent_id.handle", path)
        dst = _id(rec, "dst_agent_id.handle", path)
        # The device end of the copy: the GPU among source and destination.
        agent = src if agents.get(src, {}).get("type") == GPU_AGENT_TYPE else dst
        size = rec.get("bytes")
        out.append(Activity("memcpy", _op_name(ops, "MEMORY_COPY", rec, path), agent, -1, start, end,
                            _id(rec, "correlation_id.internal", path),
                            float(size) if isinstance(size, (int, float)) and not isinstance(size, bool) else float("nan")))
    return out


def agent_table(proc: dict, path: Path) -> dict[int, dict]:
    out = {}
    for agent in sequence(proc.get("agents", []), "agents", path):
        agent = mapping(agent, "agents[]", path)
        out[_id(agent, "id.handle", path)] = agent
    return out


def device_index(agent: dict | None) -> int:
    if not agent:
        return -1
    for key in ("gpu_index", "logical_node_type_id"):
        value = agent.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return -1


def agent_label(agent: dict | None) -> str:
    """The GPU's marketing/product name ('AMD Instinct MI350X'), else its gfx name."""
    if not agent:
        return ""
    for key in ("marketing_name", "product_name", "name"):
        value = agent.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


@dataclass
class Process:
    """What one rocprofiler-sdk-tool entry (one profiled process) contributes."""

    activities: list[Activity]
    calls: dict[int, ApiCall]
    agents: dict[int, dict]
    events: int
    info: dict


def read_process(proc: Any, path: Path) -> Process:
    proc = mapping(proc, TOOL_KEY + "[]", path)
    ops = operation_names(proc, path)
    agents = agent_table(proc, path)
    calls = api_calls(proc, ops, path)
    acts = dispatches(proc, kernel_names(proc, path), path) + memory_copies(proc, ops, agents, path)
    meta = proc.get("metadata") if isinstance(proc.get("metadata"), dict) else {}
    info = {k: meta[k] for k in ("pid", "command") if k in meta}
    return Process(acts, calls, agents, len(acts) + len(calls), info)


def _per_unique(values: list, fn) -> list:
    """fn applied once per distinct value (kernel names and agents repeat thousands of times)."""
    cache = {v: fn(v) for v in set(values)}
    return [cache[v] for v in values]


def tables(procs: list[Process]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One op row and one kernels row per activity, times in us from the first event."""
    import pandas as pd

    starts = [a.start_ns for p in procs for a in p.activities] + [c.start_ns for p in procs for c in p.calls.values()]
    t0 = min(starts) if starts else 0.0
    acts: list[Activity] = []
    calls: list[ApiCall | None] = []
    agents: list[dict | None] = []
    for p in procs:
        ordered = sorted(p.activities, key=lambda a: a.start_ns)
        acts += ordered
        calls += [p.calls.get(a.correlation) for a in ordered]
        agents += [p.agents.get(a.agent) for a in ordered]
    n = len(acts)
    start = (np.fromiter((a.start_ns for a in acts), np.float64, n) - t0) / 1e3
    dur = np.fromiter((a.end_ns - a.start_ns for a in acts), np.float64, n) / 1e3
    linked = np.fromiter((c is not None for c in calls), bool, n)
    call_start = (np.fromiter((c.start_ns if c else 0.0 for c in calls), np.float64, n) - t0) / 1e3
    call_dur = np.fromiter((c.end_ns - c.start_ns if c else 0.0 for c in calls), np.float64, n) / 1e3
    # Object columns (not pandas' inferred str dtype): the schema keeps str columns as object.
    names = pd.Series([a.name for a in acts], dtype=object)
    kinds = pd.Series([a.kind for a in acts], dtype=object)
    queues = np.fromiter((a.queue for a in acts), np.int64, n)
    agent_ids = [id(a) if a is not None else 0 for a in agents]
    by_id = {id(a): a for a in agents if a is not None}
    op_ids = np.arange(n, dtype=np.int64)
    ops_df = pd.DataFrame({
        "name": names,
        "op_class": pd.Series(["copy" if k == "memcpy" else c for k, c in zip(kinds, _per_unique(names, classify_kernel))],
                              dtype=object),
        "device_name": pd.Series(_per_unique(agent_ids, lambda i: agent_label(by_id.get(i))), dtype=object),
        "stream": queues,
        "start_us": np.where(linked, call_start, start),
        "host_us": call_dur,
        "device_us": dur,
        "bytes": np.fromiter((a.bytes for a in acts), np.float64, n),
        "synthetic": ~linked,
    }).assign(op_id=op_ids, parent_id=-1, step=-1, framework_op="", module="", device_type="rocm",
              kernel_count=1, kernels=names, flops=np.nan, input_shapes="", dtypes="")
    kern_df = pd.DataFrame({
        "name": names, "kind": kinds,
        "device_id": np.array(_per_unique(agent_ids, lambda i: device_index(by_id.get(i))), dtype=np.int64),
        "stream": queues, "start_us": start, "dur_us": dur,
        "correlation": np.fromiter((a.correlation for a in acts), np.int64, n),
    }).assign(op_id=op_ids, step=-1)
    return ops_df, kern_df


def main_gpu(procs: list[Process]) -> dict | None:
    """The GPU agent that ran the most activities (the one the trace is about)."""
    counts = Counter((i, a.agent) for i, p in enumerate(procs) for a in p.activities)
    for (i, handle), _ in counts.most_common():
        agent = procs[i].agents.get(handle)
        if agent and agent.get("type") == GPU_AGENT_TYPE:
            return agent
    gpus = [a for p in procs for a in p.agents.values() if a.get("type") == GPU_AGENT_TYPE]
    return gpus[0] if gpus else None


def read(path: Path) -> ReadResult:
    path = Path(path)
    doc = load_json(path, "rocprofv3 trace")
    if not isinstance(doc, dict) or TOOL_KEY not in doc:
        raise TraceFormatError(f"no {TOOL_KEY!r} key: not a rocprofv3 JSON trace", path=path)
    procs = [read_process(p, path) for p in sequence(doc[TOOL_KEY], TOOL_KEY, path)]
    ops, kernels = tables(procs)
    gpu = main_gpu(procs)
    meta = TraceMeta(
        profiler=FORMAT,
        device_type="rocm",
        device_name=agent_label(gpu),
        device_properties={k: gpu[k] for k in AGENT_PROPERTIES if gpu and k in gpu},
        events_read=sum(p.events for p in procs),
        extra={"processes": [p.info for p in procs], "api_linked": int((~ops["synthetic"]).sum()) if len(ops) else 0,
               "stream_is": "HSA queue handle"},
    )
    return ReadResult(ops, kernels, meta)
