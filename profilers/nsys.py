"""Nsight Systems SQLite exports (`nsys export --type sqlite`), old (2.x) and new (3.x) schemas.

Device work is CUPTI_ACTIVITY_KIND_KERNEL / _MEMCPY / _MEMSET, one kernels row each; the CUDA
runtime call that launched it (CUPTI_ACTIVITY_KIND_RUNTIME, same correlationId in the same
process; of nested calls such as cudaLaunchKernel around cudaLaunchKernel_v7000, the outer)
places it on a host thread, and the innermost NVTX op range open there at that moment owns it
(profilers.nsys_nvtx says which ranges are ops and which module scopes). Work no op range
encloses gets an op of its own named by the kernel: launched from a traced runtime call it is
a real op, otherwise synthetic. Several processes with GPU work make a multi-rank job (rank
= process, by pid); one process driving several GPUs, a rank per device. GPU names come from
TARGET_INFO_GPU when the export has it (trimmed files may not).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from porter.core.errors import TraceFormatError
from porter.core.opclass import classify
from profilers.base import ReadResult, TraceMeta
from profilers.intervals import NONE, Nesting, Timeline
from profilers.nsys_nvtx import fsdp_scopes, parse
from profilers.sqlite_db import Database, DeviceWork, intervals, ints, is_sqlite, open_db, table_names, texts

FORMAT = "nsys"
REPORT_SUFFIX = ".nsys-rep"
KERNEL, MEMCPY, MEMSET, RUNTIME = (f"CUPTI_ACTIVITY_KIND_{k}" for k in ("KERNEL", "MEMCPY", "MEMSET", "RUNTIME"))
META_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")  # 3.x, 2.x
NVTX_RANGE_TYPES = (59, 60)  # NvtxPushPopRange, NvtxStartEndRange
COPY_KINDS = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD", 9: "HtoH",
              10: "PtoP", 11: "HtoD (unified)", 12: "DtoH (unified)", 13: "DtoD (unified)"}
GPU_PROPERTIES = ("name", "chipName", "smCount", "totalMemory", "memoryBandwidth", "clockRate", "l2CacheSize",
                  "computeMajor", "computeMinor", "busLocation")
EXPORT_HINT = "export it with `nsys export --type sqlite FILE.nsys-rep`; profile with `nsys profile --trace=cuda,nvtx`"
TID_BITS = 24  # globalTid = globalPid | tid: the process is globalTid >> 24


def sniff(path: Path, head: bytes) -> bool:
    if Path(path).name.endswith(REPORT_SUFFIX):
        return True
    if not is_sqlite(head):
        return False
    tables = table_names(path)
    return bool(tables) and any(t in tables for t in META_TABLES) and "StringIds" in tables


@dataclass
class Activities(DeviceWork):
    """Device work on the session clock, with the process that launched it."""

    process: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # globalPid >> 24


def export_version(db: Database) -> tuple[str, str]:
    """(nsys version, export schema version) from the export's metadata table."""
    for table in META_TABLES:
        if table in db.tables:
            meta = {str(k): str(v) for k, v in db.rows(f'SELECT name, value FROM "{table}"')}
            return meta.get("EXPORT_PRODUCT_VERSION", "?"), meta.get("EXPORT_SCHEMA_VERSION", "?")
    return "?", "?"


def _activity_rows(db: Database, table: str, extra: str) -> list[tuple]:
    cols = db.columns(table)
    if "globalPid" not in cols:
        raise db.fail(f"{table} has no globalPid column (an export older than porter reads?)", EXPORT_HINT)
    return db.rows(f'SELECT start, end, deviceId, streamId, correlationId, globalPid, {extra} FROM "{table}"')


def activities(db: Database, strings: dict[int, str]) -> Activities:
    name: list[str] = []
    kind: list[str] = []
    rows: list[tuple] = []
    kcols = db.columns(KERNEL)
    label = "demangledName" if "demangledName" in kcols else "shortName"
    krows = _activity_rows(db, KERNEL, f"{label}, NULL")
    name += texts(ints((r[6] for r in krows), f"{KERNEL}.{label}", db, default=-1), strings)
    kind += ["kernel"] * len(krows)
    rows += krows
    if MEMCPY in db.tables:
        mrows = _activity_rows(db, MEMCPY, "copyKind, bytes")
        name += [f"Memcpy {COPY_KINDS.get(k, f'kind {k}')}" for k in ints((r[6] for r in mrows), "copyKind", db, 0)]
        kind += ["memcpy"] * len(mrows)
        rows += mrows
    if MEMSET in db.tables:
        srows = _activity_rows(db, MEMSET, "NULL, bytes")
        name += ["Memset"] * len(srows)
        kind += ["memset"] * len(srows)
        rows += srows
    col = list(zip(*rows)) if rows else [()] * 8
    start, end = ints(col[0], "start", db), ints(col[1], "end", db)
    intervals(start, end, "a device activity", db)
    size = np.array([float(b) if isinstance(b, (int, float)) else np.nan for b in col[7]], dtype=np.float64)
    return Activities(name, kind, start, end, ints(col[2], "deviceId", db, -1), ints(col[3], "streamId", db, -1),
                      ints(col[4], "correlationId", db, -1), size, process=ints(col[5], "globalPid", db) >> TID_BITS)


@dataclass
class Calls:
    """CUDA runtime calls, the outermost per (process, correlation id)."""

    start: np.ndarray
    end: np.ndarray
    thread: np.ndarray  # globalTid
    process: np.ndarray
    correlation: np.ndarray


def runtime_calls(db: Database) -> Calls:
    if RUNTIME not in db.tables:
        z = np.zeros(0, dtype=np.int64)
        return Calls(z, z, z, z, z)
    rows = db.rows(f'SELECT start, end, globalTid, correlationId FROM "{RUNTIME}"')
    col = list(zip(*rows)) if rows else [()] * 4
    start, end, tid, corr = (ints(c, f"{RUNTIME}.{n}", db, -1 if n == "correlationId" else None)
                             for c, n in zip(col, ("start", "end", "globalTid", "correlationId")))
    intervals(start, end, "a CUDA runtime call", db)
    proc = tid >> TID_BITS
    order = np.lexsort((-(end - start), start, corr, proc))  # per (process, correlation): outermost first
    proc, corr = proc[order], corr[order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = (proc[1:] != proc[:-1]) | (corr[1:] != corr[:-1])
    keep = order[first]
    return Calls(start[keep], end[keep], tid[keep], proc[first], corr[first])


def link(acts: Activities, calls: Calls) -> np.ndarray:
    """Index into calls of each activity's launching call, NONE when it was not traced."""
    n = len(acts.start)
    if not len(calls.start) or not n:
        return np.full(n, NONE, dtype=np.int64)
    procs, inv = np.unique(np.concatenate([calls.process, acts.process]), return_inverse=True)
    corr_hi = int(max(calls.correlation.max(), acts.correlation.max())) + 1
    key = inv.astype(np.int64) * corr_hi + np.concatenate([calls.correlation, acts.correlation])
    ckey, akey = key[:len(calls.start)], key[len(calls.start):]
    order = np.argsort(ckey)
    pos = np.clip(np.searchsorted(ckey[order], akey), 0, len(ckey) - 1)
    hit = (ckey[order][pos] == akey) & (acts.correlation >= 0)
    return np.where(hit, order[pos], NONE)


@dataclass
class Ranges:
    """NVTX ranges: text parsed, per thread."""

    name: list[str]
    is_op: np.ndarray
    shapes: list[str]
    start: np.ndarray
    end: np.ndarray
    thread: np.ndarray


def nvtx_ranges(db: Database, strings: dict[int, str]) -> Ranges:
    if "NVTX_EVENTS" not in db.tables:
        z = np.zeros(0, dtype=np.int64)
        return Ranges([], np.zeros(0, dtype=bool), [], z, z, z)
    rows = db.rows("SELECT start, end, text, textId, globalTid FROM NVTX_EVENTS "
                   f"WHERE eventType IN {NVTX_RANGE_TYPES} AND end IS NOT NULL")
    col = list(zip(*rows)) if rows else [()] * 5
    start, end = ints(col[0], "NVTX_EVENTS.start", db), ints(col[1], "NVTX_EVENTS.end", db)
    intervals(start, end, "an NVTX range", db)
    text_ids = ints(col[3], "NVTX_EVENTS.textId", db, -1)
    raw = [t if isinstance(t, str) else strings.get(int(i), "") for t, i in zip(col[2], text_ids)]
    parsed = [parse(t) for t in raw]
    return Ranges([p.name for p in parsed], np.array([p.is_op for p in parsed], dtype=bool),
                  [p.input_shapes for p in parsed], start, end, ints(col[4], "NVTX_EVENTS.globalTid", db, -1))


def scope_paths(ranges: Ranges, line: Timeline, t0: int, tid_index: np.ndarray) -> tuple[Nesting, list[str]]:
    """Module scopes (non-op ranges and FSDP forwards) nested per thread, each with its path."""
    keep = np.flatnonzero(~ranges.is_op)
    names = [ranges.name[i] for i in keep]
    starts, ends, threads = list(ranges.start[keep]), list(ranges.end[keep]), list(tid_index[keep])
    absolute = [False] * len(keep)
    thread_of = {int(t): int(i) for t, i in zip(ranges.thread, tid_index)}
    for module, s, e, tid in fsdp_scopes(ranges.name, ranges.start, ranges.end, ranges.thread):
        names.append(module)
        starts.append(s)
        ends.append(e)
        threads.append(thread_of[tid])
        absolute.append(True)
    s_arr = line.key(np.array(starts, dtype=np.float64) - t0, np.array(threads, dtype=np.float64))
    nest = Nesting(s_arr, s_arr + (np.array(ends, dtype=np.float64) - np.array(starts, dtype=np.float64)))
    parents = nest.parents()
    paths = [""] * len(names)
    for i in nest.order:  # outer scopes sort first
        p = int(parents[i])
        if p == NONE or (absolute[i] and absolute[p]):
            paths[i] = names[i]
        else:
            paths[i] = f"{paths[p]}/{names[i]}"
    return nest, paths


def _ranks(acts: Activities) -> tuple[np.ndarray, np.ndarray, str]:
    """(sorted process keys, per-process rank or per-device rank, what a rank is)."""
    procs = np.unique(acts.process)
    if len(procs) > 1:
        return procs, np.arange(len(procs)), "process"
    if len(np.unique(acts.device)) > 1:
        return procs, np.zeros(0, dtype=np.int64), "device"
    return procs, np.zeros(0, dtype=np.int64), ""


def gpu_table(db: Database) -> dict[int, dict]:
    if "TARGET_INFO_GPU" not in db.tables:
        return {}
    cols = db.columns("TARGET_INFO_GPU")
    wanted = [c for c in ("id",) + GPU_PROPERTIES if c in cols]
    if "id" not in wanted:
        return {}
    out = {}
    for row in db.rows(f'SELECT {", ".join(wanted)} FROM TARGET_INFO_GPU'):
        info = dict(zip(wanted, row))
        if isinstance(info["id"], int):
            out[info.pop("id")] = info
    return out


def process_names(db: Database) -> dict[int, tuple[int, str]]:
    if "PROCESSES" not in db.tables:
        return {}
    return {int(g) >> TID_BITS: (p, str(n)) for g, p, n in db.rows("SELECT globalPid, pid, name FROM PROCESSES")
            if isinstance(g, int)}


def read(path: Path) -> ReadResult:
    path = Path(path)
    if path.name.endswith(REPORT_SUFFIX):
        raise TraceFormatError("is an Nsight Systems report (.nsys-rep), which porter reads once exported to SQLite",
                               path=path, hint=f"run `nsys export --type sqlite {path.name}`, then ingest the .sqlite")
    db = open_db(path, "Nsight Systems export")
    try:
        version, schema = export_version(db)
        db.what = f"Nsight Systems {version} export (schema {schema})"
        db.require("StringIds", KERNEL, hint=EXPORT_HINT)
        strings = {int(i): str(v) for i, v in db.rows("SELECT id, value FROM StringIds") if isinstance(i, int)}
        acts = activities(db, strings)
        calls = runtime_calls(db)
        ranges = nvtx_ranges(db, strings)
        gpus, procs = gpu_table(db), process_names(db)
    finally:
        db.close()
    return tables(acts, calls, ranges, gpus, procs, version, schema)


def tables(acts: Activities, calls: Calls, ranges: Ranges, gpus: dict[int, dict], procs: dict[int, tuple[int, str]],
           version: str, schema: str) -> ReadResult:
    n = len(acts.start)
    launch = link(acts, calls)
    linked = launch != NONE
    tids = np.unique(np.concatenate([calls.thread, ranges.thread]))
    tid_index = np.searchsorted(tids, ranges.thread)
    all_starts = [a for a in (acts.start, calls.start, ranges.start) if len(a)]
    t0 = int(min(int(a.min()) for a in all_starts)) if all_starts else 0
    span = int(max(int(a.max()) for a in (acts.end, calls.end, ranges.end) if len(a)) - t0 + 1) if all_starts else 1
    line = Timeline(span=2.0 * span + 1.0)

    def key(t: np.ndarray, thread_idx: np.ndarray) -> np.ndarray:
        return line.key((t - t0).astype(np.float64), thread_idx)

    op_idx = np.flatnonzero(ranges.is_op)
    op_start = key(ranges.start[op_idx], tid_index[op_idx])
    op_nest = Nesting(op_start, op_start + (ranges.end[op_idx] - ranges.start[op_idx]).astype(np.float64))
    scope_nest, scope_path = scope_paths(ranges, line, t0, tid_index) if len(ranges.start) else (Nesting(np.zeros(0), np.zeros(0)), [])

    # The owning op range of each launch: innermost op range open on the launching thread.
    call_of = np.clip(launch, 0, None)
    launch_t = calls.start[call_of] if len(calls.start) else np.zeros(n, dtype=np.int64)
    launch_thread = np.searchsorted(tids, calls.thread[call_of]) if len(calls.start) else np.zeros(n, dtype=np.int64)
    owner = np.where(linked, op_nest.enclosing(key(launch_t, launch_thread)), NONE) if n else np.zeros(0, dtype=np.int64)

    n_ranges = len(op_idx)
    own = owner == NONE  # work no op range encloses: an op of its own
    op_of_act = np.where(own, n_ranges + np.cumsum(own) - 1, owner)
    n_ops = n_ranges + int(own.sum())
    dur = (acts.end - acts.start).astype(np.float64) / 1e3
    device_us = np.bincount(op_of_act, weights=dur, minlength=n_ops)
    kernel_count = np.bincount(op_of_act, minlength=n_ops)
    order = np.lexsort((acts.start, op_of_act))
    first_act = np.full(n_ops, -1, dtype=np.int64)
    names_of: list[list[str]] = [[] for _ in range(n_ops)]
    for a in order:
        o = op_of_act[a]
        if first_act[o] < 0:
            first_act[o] = a
        if acts.name[a] not in names_of[o]:
            names_of[o].append(acts.name[a])

    # Ranks, devices and processes.
    proc_keys, proc_rank, rank_is = _ranks(acts)
    busiest = np.bincount(np.searchsorted(proc_keys, acts.process), weights=dur, minlength=len(proc_keys)) if n else []
    main_dev: dict[int, int] = {}
    for p in proc_keys:
        sel = acts.process == p
        devs, w = np.unique(acts.device[sel], return_inverse=True)
        main_dev[int(p)] = int(devs[np.argmax(np.bincount(w, weights=dur[sel]))])
    devs_all = np.unique(acts.device)

    def rank_of(process: np.ndarray, device: np.ndarray) -> np.ndarray:
        if rank_is == "process":
            return proc_rank[np.clip(np.searchsorted(proc_keys, process), 0, len(proc_keys) - 1)]
        if rank_is == "device":
            return np.searchsorted(devs_all, device)
        return np.full(len(process), -1, dtype=np.int64)

    range_proc = ranges.thread[op_idx] >> 24
    op_proc = np.concatenate([range_proc, acts.process[own]])
    op_dev = np.array([acts.device[a] if a >= 0 else main_dev.get(int(p), -1) for a, p in zip(first_act, op_proc)],
                      dtype=np.int64)
    dev_name = {d: str(gpus.get(d, {}).get("name", "")) for d in set(op_dev.tolist()) | set(acts.device.tolist())}

    # Op rows: the NVTX op ranges, then one per activity no range owns.
    own_idx = np.flatnonzero(own)
    own_call = launch[own_idx]
    has_call = own_call != NONE
    r_names = [ranges.name[i] for i in op_idx]
    name = r_names + [acts.name[a] for a in own_idx]
    framework = r_names + [""] * len(own_idx)
    start_ns = np.concatenate([ranges.start[op_idx], np.where(has_call, calls.start[np.clip(own_call, 0, None)] if len(calls.start) else 0,
                                                              acts.start[own_idx])]).astype(np.float64)
    host_ns = np.concatenate([ranges.end[op_idx] - ranges.start[op_idx],
                              np.where(has_call, (calls.end - calls.start)[np.clip(own_call, 0, None)] if len(calls.start) else 0, 0)])
    parents = op_nest.parents() if n_ranges else np.zeros(0, dtype=np.int64)
    # Module: the innermost scope open at the op's start on its thread.
    op_thread = np.concatenate([tid_index[op_idx], np.searchsorted(tids, calls.thread[np.clip(own_call, 0, None)])
                                if len(calls.start) else np.zeros(len(own_idx), dtype=np.int64)])
    scope = scope_nest.enclosing(key(start_ns, op_thread)) if len(scope_nest) else np.full(n_ops, NONE)
    scope = np.where(np.concatenate([np.ones(n_ranges, dtype=bool), has_call]), scope, NONE)
    module = [scope_path[s] if s != NONE else "" for s in scope]
    kernels_col = ["\n".join(k) for k in names_of]
    op_class = [classify(framework[i], names_of[i]) for i in range(n_ops)]
    op_bytes = np.full(n_ops, np.nan)
    op_bytes[n_ranges:] = acts.bytes[own_idx]
    ops = {
        "op_id": np.arange(n_ops, dtype=np.int64),
        "parent_id": np.concatenate([parents, np.full(len(own_idx), NONE, dtype=np.int64)]),
        "step": np.full(n_ops, -1, dtype=np.int64),
        "name": np.array(name, dtype=object), "framework_op": np.array(framework, dtype=object),
        "op_class": np.array(op_class, dtype=object), "module": np.array(module, dtype=object),
        "device_type": np.full(n_ops, "cuda", dtype=object),
        "device_name": np.array([dev_name.get(int(d), "") for d in op_dev], dtype=object),
        "stream": np.where(first_act >= 0, acts.stream[np.clip(first_act, 0, None)] if n else -1, -1).astype(np.int64),
        "start_us": (start_ns - t0) / 1e3, "host_us": host_ns.astype(np.float64) / 1e3,
        "device_us": device_us, "kernel_count": kernel_count.astype(np.int64),
        "kernels": np.array(kernels_col, dtype=object), "flops": np.full(n_ops, np.nan), "bytes": op_bytes,
        "input_shapes": np.array([ranges.shapes[i] for i in op_idx] + [""] * len(own_idx), dtype=object),
        "dtypes": np.full(n_ops, "", dtype=object),
        "synthetic": np.concatenate([np.zeros(n_ranges, dtype=bool), ~has_call]),
        "rank": rank_of(op_proc, op_dev),
    }
    kernels = {
        "op_id": op_of_act.astype(np.int64), "step": np.full(n, -1, dtype=np.int64),
        "name": np.array(acts.name, dtype=object), "kind": np.array(acts.kind, dtype=object),
        "device_id": acts.device, "stream": acts.stream,
        "start_us": (acts.start - t0).astype(np.float64) / 1e3, "dur_us": dur,
        "correlation": acts.correlation, "rank": rank_of(acts.process, acts.device),
    }
    top = int(acts.device[np.argmax(dur)]) if n else -1
    by_dev = {int(d): float(dur[acts.device == d].sum()) for d in devs_all}
    top = max(by_dev, key=by_dev.get) if by_dev else top
    info = gpus.get(top, {})
    meta = TraceMeta(
        profiler=FORMAT, device_type="cuda", device_name=str(info.get("name", "")),
        device_properties={k: v for k, v in info.items() if v is not None},
        framework_versions={"nsys": version},
        events_read=n + len(calls.start) + len(ranges.start),
        extra={"nsys_version": version, "export_schema": schema, "api_linked": int(linked.sum()),
               "nvtx_ranges": len(ranges.start), "nvtx_op_ranges": n_ranges,
               "ranks_are": rank_is or "single",
               "processes": [{"pid": procs.get(int(p), (None, ""))[0], "name": procs.get(int(p), (None, ""))[1],
                              "busy_us": round(float(b), 3), "device": main_dev[int(p)]}
                             for p, b in zip(proc_keys, busiest)],
               "devices": {str(d): dev_name.get(int(d), "") for d in devs_all}},
    )
    return ReadResult(ops, kernels, meta)
