"""Trace file -> bundle."""

from __future__ import annotations

import shutil
import time
from dataclasses import asdict
from pathlib import Path

from porter.bundle import RAW, Bundle, base_manifest, file_sha256, is_bundle, load_bundle, staging, write_manifest, write_tables
from profilers.base import ReadResult
from profilers.detect import read_trace


def bundle_name_for(trace: Path) -> str:
    name = trace.name
    for suffix in (".gz", ".json", ".pb", ".xplane", ".pt.trace"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name or "trace"


def manifest_for(trace: Path, result: ReadResult, fmt_seconds: float) -> dict:
    meta = result.meta
    ops, kernels = result.ops, result.kernels
    return base_manifest(
        label=bundle_name_for(trace),
        source={"path": str(trace), "name": trace.name, "sha256": file_sha256(trace), "bytes": trace.stat().st_size},
        profiler=meta.profiler,
        device={"type": meta.device_type, "name": meta.device_name, "properties": meta.device_properties},
        framework_versions=meta.framework_versions,
        stats={
            "events_read": meta.events_read,
            "ops": int(len(ops)),
            "kernels": int(len(kernels)),
            "device_us_total": float(kernels["dur_us"].sum()) if len(kernels) else 0.0,
            "read_seconds": round(fmt_seconds, 4),
        },
        trace_meta=meta.extra,
    )


def ingest(trace: Path, out_dir: Path, fmt: str | None = None, keep_raw: bool = True) -> Path:
    """Read one trace and write its bundle under out_dir; returns the bundle path."""
    trace = Path(trace)
    t0 = time.perf_counter()
    result = read_trace(trace, fmt)
    elapsed = time.perf_counter() - t0
    dest = Path(out_dir) / bundle_name_for(trace)
    with staging(dest) as tmp:
        write_tables(tmp, result.ops, result.kernels)
        if keep_raw:
            (tmp / RAW).mkdir()
            shutil.copy2(trace, tmp / RAW / trace.name)
        write_manifest(tmp, manifest_for(trace, result, elapsed))
    return dest


def open_any(path: Path, fmt: str | None = None) -> Bundle:
    """A bundle directory as is, or a raw trace read in memory (nothing written)."""
    path = Path(path)
    if is_bundle(path):
        return load_bundle(path)
    t0 = time.perf_counter()
    result = read_trace(path, fmt)
    manifest = manifest_for(path, result, time.perf_counter() - t0)
    manifest["meta"] = asdict(result.meta)
    return Bundle(path=path, manifest=manifest, ops=result.ops, kernels=result.kernels)
