"""One Parquet file per benchmark run: the artifact CI keeps, loadable into any store.

Long format, one row per raw sample (a failed case is one row with a null sample), with
the run, environment and context repeated as JSON columns (Parquet's dictionary
encoding stores each once). `porter bench import FILE...` rebuilds the RunRecord and
writes it like a fresh run; a run already in the store is left alone.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from porter.bench.records import CaseResult, RunRecord
from porter.core.errors import PorterError

COLUMNS = ("run_id", "suite", "started_at", "finished_at", "environment", "context", "position", "case", "device_class",
           "target", "spec", "status", "error", "number", "unstable", "info", "idx", "seconds")


def run_file_name(run: RunRecord) -> str:
    """e.g. 2026-12-01T120455_builtin_1a2b3c4d5e6f.parquet (safe on every file system)."""
    stem = f"{run.started_at[:19].replace(':', '')}_{run.suite}_{run.run_id[:12]}"
    return re.sub(r"[^A-Za-z0-9._-]", "_", stem) + ".parquet"


def to_table(run: RunRecord) -> pa.Table:
    rows: dict[str, list] = {c: [] for c in COLUMNS}
    head = {"run_id": run.run_id, "suite": run.suite, "started_at": run.started_at, "finished_at": run.finished_at,
            "environment": json.dumps(run.environment, sort_keys=True, default=str),
            "context": json.dumps(run.context, sort_keys=True, default=str)}
    for pos, r in enumerate(run.results):
        case = {"position": pos, "case": r.case, "device_class": r.device_class, "target": r.target,
                "spec": json.dumps(r.spec, sort_keys=True), "status": r.status, "error": r.error, "number": r.number,
                "unstable": r.unstable, "info": json.dumps(r.info, sort_keys=True, default=str)}
        points = list(enumerate(r.samples_s)) or [(None, None)]
        for idx, seconds in points:
            for k, v in {**head, **case, "idx": idx, "seconds": seconds}.items():
                rows[k].append(v)
    schema = pa.schema([(c, pa.int64() if c in ("position", "number", "idx") else pa.bool_() if c == "unstable"
                         else pa.float64() if c == "seconds" else pa.string()) for c in COLUMNS])
    return pa.table(rows, schema=schema)


def export_run(run: RunRecord, folder: Path) -> Path:
    """Write the run's Parquet file into folder (temp file, then rename)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    dest = folder / run_file_name(run)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=folder)
    os.close(fd)
    try:
        pq.write_table(to_table(run), tmp)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return dest


def read_run(path: Path) -> RunRecord:
    """The RunRecord a file written by export_run holds; a wrong file is a PorterError."""
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowInvalid) as exc:
        raise PorterError(f"not a Parquet file: {' '.join(str(exc).split())[:200]}", path=path) from None
    missing = [c for c in COLUMNS if c not in table.column_names]
    if missing or table.num_rows == 0:
        raise PorterError(f"not a porter bench run (missing columns: {', '.join(missing) or 'no rows'})", path=path)
    cols = table.to_pydict()
    if len(set(cols["run_id"])) != 1:
        raise PorterError("holds more than one run", path=path)
    results: dict[int, CaseResult] = {}
    for i in range(table.num_rows):
        pos = cols["position"][i]
        if pos not in results:
            results[pos] = CaseResult(cols["case"][i], cols["target"][i], cols["device_class"][i], json.loads(cols["spec"][i]),
                                      cols["status"][i], cols["error"][i], [], cols["number"][i], bool(cols["unstable"][i]),
                                      json.loads(cols["info"][i]))
        if cols["seconds"][i] is not None:
            results[pos].samples_s.append(float(cols["seconds"][i]))
    return RunRecord(cols["run_id"][0], cols["suite"][0], cols["started_at"][0], cols["finished_at"][0],
                     json.loads(cols["environment"][0]), json.loads(cols["context"][0]),
                     [results[p] for p in sorted(results)])


__all__ = ["export_run", "read_run", "run_file_name", "to_table"]
