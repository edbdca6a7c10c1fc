"""Build large Kineto traces from a real one by replicating its event list N times.

The corpus holds real traces of a few thousand events; production traces run to 100k
and millions. Replica k of the source's events is shifted so the result stays a valid
trace whose links resolve one-to-one inside each replica and never across them:

* timestamps move by k * period, period = the events' span plus a 1% gap;
* every id that links events (External id, correlation, flow ids, Python id and parent
  id, Ev Idx, autograd Sequence number, the sync record's correlation) moves by
  k * stride, one stride for all of them (max id + 1), so ids that are equal in the
  source (a flow id and its correlation) stay equal in each replica;
* `ProfilerStep#N` names move by k * (number of steps).

The envelope (metadata `M` events, the profiler's `Trace` span and global instant
events, i.e. events whose pid is not a process id) is written once; the span and the
"Record Window End" marker are stretched to cover all replicas.

Usage: python benchmarks/replicate.py SRC OUT (-n N | --events E) [--level L]
"""

from __future__ import annotations

import argparse
import gzip
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import orjson

ID_ARGS = ("External id", "correlation", "Python id", "Python parent id", "Ev Idx",
           "Sequence number", "wait_on_cuda_event_record_corr_id")
FLOW_PHASES = frozenset({"s", "t", "f"})
STEP = re.compile(r"ProfilerStep#(\d+)")


@dataclass(frozen=True)
class Source:
    """A parsed trace split into what is written once and what is replicated."""

    top: dict[str, Any]  # every top-level key but traceEvents
    envelope: list[dict]
    body: list[dict]
    period: float  # time shift between replicas (trace units: us)
    stride: int  # id shift between replicas
    steps: int  # ProfilerStep numbers shift between replicas


def _is_envelope(event: dict) -> bool:
    return event.get("ph") == "M" or not isinstance(event.get("pid"), int)


def _int(value: Any) -> bool:
    return type(value) is int


def load(path: Path) -> Source:
    """Parse a Kineto trace (.json or .json.gz) and measure its time, id and step ranges."""
    data = Path(path).read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    doc = orjson.loads(data)
    events = doc.pop("traceEvents")
    envelope = [e for e in events if _is_envelope(e)]
    body = [e for e in events if not _is_envelope(e)]
    starts = [e["ts"] for e in body if isinstance(e.get("ts"), (int, float))]
    ends = [e["ts"] + e.get("dur", 0) for e in body if isinstance(e.get("ts"), (int, float))]
    span = (max(ends) - min(starts)) if starts else 0
    ids = [0]
    steps = []
    for e in body:
        if e.get("ph") in FLOW_PHASES and _int(e.get("id")):
            ids.append(e["id"])
        args = e.get("args")
        if args:
            ids.extend(args[k] for k in ID_ARGS if _int(args.get(k)))
        m = STEP.fullmatch(e.get("name", "")) if isinstance(e.get("name"), str) else None
        if m:
            steps.append(int(m.group(1)))
    n_steps = (max(steps) - min(steps) + 1) if steps else 0
    return Source(doc, envelope, body, float(math.ceil(span * 1.01) + 1), max(ids) + 1, n_steps)


def shifted(event: dict, dt: float, did: int, dstep: int) -> dict:
    """A copy of `event` moved by dt in time, did in ids and dstep in step numbers."""
    out = dict(event)
    if _int(out.get("ts")):
        out["ts"] = out["ts"] + int(dt)
    elif isinstance(out.get("ts"), float):
        out["ts"] = out["ts"] + dt
    if out.get("ph") in FLOW_PHASES and _int(out.get("id")):
        out["id"] = out["id"] + did
    args = out.get("args")
    if args:
        args = out["args"] = dict(args)
        for k in ID_ARGS:
            if _int(args.get(k)):
                args[k] = args[k] + did
    name = out.get("name")
    if dstep and isinstance(name, str) and name.startswith("ProfilerStep#"):
        m = STEP.fullmatch(name)
        if m:
            out["name"] = f"ProfilerStep#{int(m.group(1)) + dstep}"
    return out


def stretched_envelope(src: Source, n: int) -> list[dict]:
    """The envelope with the profiler span and window end moved to cover n replicas."""
    extra = (n - 1) * src.period
    out = []
    for e in src.envelope:
        e = dict(e)
        if e.get("ph") == "X" and isinstance(e.get("dur"), (int, float)):
            e["dur"] = e["dur"] + (int(extra) if _int(e["dur"]) else extra)
        elif e.get("ph") == "i" and e.get("name") == "Record Window End" and isinstance(e.get("ts"), (int, float)):
            e["ts"] = e["ts"] + (int(extra) if _int(e["ts"]) else extra)
        out.append(e)
    return out


def write(src: Source, n: int, out: BinaryIO) -> int:
    """Stream the n-fold trace as JSON to `out` (one replica in memory at a time); returns events written."""
    head = orjson.dumps(src.top)
    out.write(head[:-1] + (b',' if len(head) > 2 else b'') + b'"traceEvents":[')
    env = stretched_envelope(src, n)
    out.write(orjson.dumps(env)[1:-1])
    first = not env
    for k in range(n):
        chunk = orjson.dumps([shifted(e, k * src.period, k * src.stride, k * src.steps) for e in src.body])[1:-1]
        if chunk:
            out.write(chunk if first else b"," + chunk)
            first = False
    out.write(b"]}")
    return len(env) + n * len(src.body)


def replicate(source: Path, dest: Path, n: int, level: int = 3) -> int:
    """Write `source` replicated n times to `dest` (.json.gz gzipped at `level`, else plain JSON)."""
    if n < 1:
        raise ValueError("n must be >= 1")
    src = load(source)
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp")
    opener = (lambda p: gzip.open(p, "wb", compresslevel=level)) if dest.name.endswith(".gz") else (lambda p: open(p, "wb"))
    with opener(tmp) as fh:
        count = write(src, n, fh)
    tmp.replace(dest)
    return count


def copies_for(source: Path, events: int) -> int:
    """How many replicas of `source` make at least `events` events."""
    return max(1, math.ceil(events / max(1, len(load(source).body))))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", type=Path)
    ap.add_argument("dest", type=Path)
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("-n", type=int, help="number of replicas")
    group.add_argument("--events", type=int, help="replicate until at least this many events")
    ap.add_argument("--level", type=int, default=3, help="gzip level for .gz output (default 3)")
    args = ap.parse_args(argv)
    n = args.n if args.n else copies_for(args.source, args.events)
    count = replicate(args.source, args.dest, n, args.level)
    print(f"{args.dest}: {n} replicas, {count} events")


if __name__ == "__main__":
    main()
