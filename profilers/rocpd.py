"""The rocpd family of SQLite databases: rocmProfileData's `.rpd` and rocprofv3's rocpd output.

Two generations share a name and little else:
* `.rpd` (rocmProfileData, the RPD tracer behind ROCm PyTorch tooling): `rocpd_op` holds GPU
  work (kernels, copies, fills; description and opType through `rocpd_string`), `rocpd_api`
  the HIP calls, `rocpd_api_ops` which call launched which op.
* rocprofv3 (`--output-format rocpd`, the default since ROCm 7): tables suffixed with the
  session's uuid behind plain-named views; `rocpd_kernel_dispatch` and `rocpd_memory_copy` hold
  GPU work, `rocpd_region` the API calls; a dispatch and the call that launched it share their
  `rocpd_event.stack_id` (the internal correlation id). Read from the documented schema
  (rocprofiler-sdk's rocpd tables, schema 3): no recorded rocprofv3 database exists in the
  corpus yet, so tests build one from that schema.
Neither records framework ops here, so each GPU activity is one op, as rocprofv3 JSON's reader
makes it (profilers.rocprof): it starts at its launching API call, and is synthetic when no
launch was traced.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from porter.core.opclass import classify_kernel
from profilers.base import ReadResult, TraceMeta
from profilers.sqlite_db import Database, DeviceWork, intervals, ints, is_sqlite, nullable_ints, open_db, table_names

FORMAT = "rocpd"
RPD_TABLES = ("rocpd_op", "rocpd_api", "rocpd_api_ops", "rocpd_string")
V3_TABLES = ("rocpd_kernel_dispatch", "rocpd_string", "rocpd_info_kernel_symbol")
HINT = "record with rocprofv3 --kernel-trace --hip-trace (rocpd is its default output) or the RPD tracer"


def generation(tables: frozenset[str]) -> str:
    """'rpd', 'rocprofv3' or '' for the tables of a database."""
    if "rocpd_op" in tables and "rocpd_api" in tables:
        return "rpd"
    if any(t == "rocpd_kernel_dispatch" or t.startswith("rocpd_kernel_dispatch_") for t in tables):
        return "rocprofv3"
    return ""


def sniff(path: Path, head: bytes) -> bool:
    if not is_sqlite(head):
        return False
    tables = table_names(path)
    return bool(tables) and bool(generation(tables))


@dataclass
class Work(DeviceWork):
    """GPU activities with the API call that launched each (NaN when none was traced)."""

    call_start: np.ndarray = field(default_factory=lambda: np.zeros(0))
    call_end: np.ndarray = field(default_factory=lambda: np.zeros(0))
    devices: dict[int, str] = field(default_factory=dict)  # device index -> product name


def _kind(op_type: str) -> str:
    if op_type.startswith("Copy"):
        return "memcpy"
    if op_type.startswith(("Fill", "Memset")):
        return "memset"
    return "kernel"


def _columns(rows: list[tuple], n: int) -> list[tuple]:
    return list(zip(*rows)) if rows else [()] * n


def _launches(db: Database, rows: list[tuple], n_cols: int) -> tuple[np.ndarray, np.ndarray]:
    """(call start, call end) columns from the last two of each row, NaN where no call."""
    col = _columns(rows, n_cols)
    start, end = nullable_ints(col[-2], "API call start", db), nullable_ints(col[-1], "API call end", db)
    if len(start) and (end < start).any():
        raise db.fail("an API call ends before it starts")
    return start, end


def read_rpd(db: Database) -> Work:
    db.require(*RPD_TABLES, hint=HINT)
    rows = db.rows(
        "SELECT coalesce(l.api_id, -1), o.gpuId, o.queueId, o.start, o.end, d.string, t.string, a.start, a.end "
        "FROM rocpd_op o LEFT JOIN rocpd_string d ON d.id = o.description_id "
        "LEFT JOIN rocpd_string t ON t.id = o.opType_id "
        "LEFT JOIN (SELECT op_id, min(api_id) AS api_id FROM rocpd_api_ops GROUP BY op_id) l ON l.op_id = o.id "
        "LEFT JOIN rocpd_api a ON a.id = l.api_id ORDER BY o.start")
    col = _columns(rows, 9)
    op_type = [str(t or "") for t in col[6]]
    name = [str(d) if d else t for d, t in zip(col[5], op_type)]
    call_start, call_end = _launches(db, rows, 9)
    return Work(name, [_kind(t) for t in op_type], ints(col[3], "rocpd_op.start", db), ints(col[4], "rocpd_op.end", db),
                ints(col[1], "rocpd_op.gpuId", db, -1), ints(col[2], "rocpd_op.queueId", db, -1),
                ints(col[0], "rocpd_api_ops.api_id", db), np.full(len(rows), np.nan), call_start=call_start, call_end=call_end)


def _v3(db: Database, view: str) -> str:
    """The view's name, else the uuid-suffixed table behind it."""
    if view in db.tables:
        return view
    return next((t for t in sorted(db.tables) if t.startswith(view + "_")), view)


def read_v3(db: Database) -> Work:
    kd, ks, ev, rg, st = (_v3(db, v) for v in ("rocpd_kernel_dispatch", "rocpd_info_kernel_symbol", "rocpd_event",
                                                 "rocpd_region", "rocpd_string"))
    for t in (kd, ks, st):
        if t not in db.tables:
            raise db.fail(f"has no {t} table", HINT)
    have_calls = ev in db.tables and rg in db.tables
    # The API call of a piece of work: the region of the same process with the same stack id.
    call = (f'LEFT JOIN "{ev}" e ON e.id = w.event_id LEFT JOIN (SELECT r.pid AS pid, re.stack_id AS sid, '
            f'min(r.start) AS start, max(r."end") AS "end" FROM "{rg}" r JOIN "{ev}" re ON re.id = r.event_id '
            f'GROUP BY r.pid, re.stack_id) c ON c.pid = w.pid AND c.sid = e.stack_id' if have_calls else "")
    cs = "c.start, c.\"end\"" if have_calls else "NULL, NULL"
    corr = "coalesce(e.stack_id, -1)" if have_calls else "-1"  # the internal correlation id
    krows = db.rows(f'SELECT {corr}, w.agent_id, w.queue_id, w.start, w."end", coalesce(s.display_name, s.kernel_name), '
                    f'NULL, {cs} FROM "{kd}" w LEFT JOIN "{ks}" s ON s.id = w.kernel_id {call} ORDER BY w.start')
    kinds = ["kernel"] * len(krows)
    mc = _v3(db, "rocpd_memory_copy")
    if mc in db.tables:
        mrows = db.rows(f'SELECT {corr}, coalesce(w.dst_agent_id, w.src_agent_id), w.queue_id, w.start, w."end", n.string, '
                        f'w.size, {cs} FROM "{mc}" w LEFT JOIN "{st}" n ON n.id = w.name_id {call} ORDER BY w.start')
        krows += mrows
        kinds += ["memcpy"] * len(mrows)
    col = _columns(krows, 9)
    names = [str(n) if n else ("kernel" if k == "kernel" else "memory copy") for n, k in zip(col[5], kinds)]
    call_start, call_end = _launches(db, krows, 9)
    ag = _v3(db, "rocpd_info_agent")
    agents = {int(i): (int(x) if isinstance(x, int) else -1, str(p or n or ""))
              for i, x, n, p in db.rows(f'SELECT id, type_index, name, product_name FROM "{ag}"')
              if isinstance(i, int)} if ag in db.tables else {}
    agent = ints(col[1], "agent_id", db, -1)
    return Work(names, kinds, ints(col[3], "start", db), ints(col[4], "end", db),
                np.array([agents.get(int(a), (int(a), ""))[0] for a in agent], dtype=np.int64),
                ints(col[2], "queue_id", db, -1), ints(col[0], "stack_id", db, -1),
                np.array([float(b) if isinstance(b, (int, float)) else np.nan for b in col[6]], dtype=np.float64),
                call_start=call_start, call_end=call_end, devices={agents[a][0]: agents[a][1] for a in agents})


def tables(w: Work) -> tuple[dict, dict]:
    n = len(w.start)
    linked = ~np.isnan(w.call_start)
    starts = np.concatenate([w.start.astype(np.float64), w.call_start[linked]])
    t0 = float(starts.min()) if len(starts) else 0.0
    dur = (w.end - w.start).astype(np.float64) / 1e3
    names = np.array(w.name, dtype=object)
    cls = {nm: classify_kernel(nm) for nm in set(w.name)}
    op_class = ["copy" if k == "memcpy" else "memset" if k == "memset" else cls[nm] for nm, k in zip(w.name, w.kind)]
    ids = np.arange(n, dtype=np.int64)
    ops = {
        "op_id": ids, "parent_id": np.full(n, -1, dtype=np.int64), "step": np.full(n, -1, dtype=np.int64),
        "name": names, "framework_op": np.full(n, "", dtype=object), "op_class": np.array(op_class, dtype=object),
        "module": np.full(n, "", dtype=object), "device_type": np.full(n, "rocm", dtype=object),
        "device_name": np.array([w.devices.get(int(d), "") for d in w.device], dtype=object), "stream": w.stream,
        "start_us": (np.where(linked, w.call_start, w.start) - t0) / 1e3,
        "host_us": np.where(linked, w.call_end - w.call_start, 0.0) / 1e3, "device_us": dur,
        "kernel_count": np.ones(n, dtype=np.int64), "kernels": names, "flops": np.full(n, np.nan), "bytes": w.bytes,
        "input_shapes": np.full(n, "", dtype=object), "dtypes": np.full(n, "", dtype=object), "synthetic": ~linked,
    }
    kernels = {
        "op_id": ids, "step": np.full(n, -1, dtype=np.int64), "name": names, "kind": np.array(w.kind, dtype=object),
        "device_id": w.device, "stream": w.stream, "start_us": (w.start - t0) / 1e3, "dur_us": dur,
        "correlation": w.correlation,
    }
    return ops, kernels



def read(path: Path) -> ReadResult:
    db = open_db(Path(path), "rocpd database")
    try:
        gen = generation(db.tables)
        db.what = {"rpd": "rocmProfileData .rpd database", "rocprofv3": "rocprofv3 rocpd database"}.get(gen, db.what)
        if not gen:
            db.require(*RPD_TABLES, hint=HINT)
        meta_table = _v3(db, "rocpd_metadata")
        meta = {str(k): str(v) for k, v in db.rows(f'SELECT tag, value FROM "{meta_table}"')} if meta_table in db.tables else {}
        work = read_rpd(db) if gen == "rpd" else read_v3(db)
        intervals(work.start, work.end, "a GPU activity", db)
    finally:
        db.close()
    ops, kernels = tables(work)
    busiest = ""
    if len(work.start):
        dev = np.unique(work.device, return_inverse=True)
        top = int(dev[0][np.argmax(np.bincount(dev[1], weights=(work.end - work.start).astype(np.float64)))])
        busiest = work.devices.get(top, "")
    return ReadResult(ops, kernels, TraceMeta(
        profiler=FORMAT, device_type="rocm", device_name=busiest,
        events_read=len(work.start), extra={"generation": gen, "schema_version": meta.get("schema_version", ""),
                                            "api_linked": int((~ops["synthetic"]).sum()),
                                            "devices": sorted(int(d) for d in set(work.device.tolist()))}))
