"""Trace file -> bundle."""

from __future__ import annotations

import re
import shutil
import time
from dataclasses import asdict
from pathlib import Path

from porter.core.atomic import OutputError, check_output_dir
from porter.core.columns import n_rows
from porter.core.run import job_rank
from porter.bundles.bundle import (RAW, Bundle, base_manifest, encode_tables, file_sha256, is_bundle, is_porter_bundle,
                                   load_bundle, staging, write_files, write_manifest)
from profilers.base import ReadResult
from profilers.detect import read_trace


_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f/\\]")  # control characters and path separators
MAX_NAME = 120


def bundle_name_for(trace: Path) -> str:
    """The trace's file name without its trace suffixes, made safe as one directory name:
    control characters and separators become `_`, leading dots go (no `.`, `..` or
    hidden names), and it is cut to MAX_NAME characters; "trace" when nothing is left."""
    name = trace.name
    for suffix in (".gz", ".json", ".pb", ".xplane", ".pt.trace", ".sqlite", ".rpd"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    name = _UNSAFE.sub("_", name).lstrip(". ")[:MAX_NAME].rstrip(" ")
    return name or "trace"


def bundle_dest(out_dir: Path, name: str, taken: set[Path] = frozenset()) -> Path:
    """Where a bundle named `name` goes: out_dir/name when that is free or a porter bundle
    to replace, else the first free name-2, name-3...; paths in `taken` (written earlier
    in the same run) are never replaced."""
    for n in range(1, 10_000):
        dest = Path(out_dir) / (name if n == 1 else f"{name}-{n}")
        if dest in taken:
            continue
        if not (dest.exists() or dest.is_symlink()) or is_porter_bundle(dest):
            return dest
    raise OutputError(f"no free name for bundle {name!r}", path=out_dir)


def manifest_for(trace: Path, result: ReadResult, fmt_seconds: float) -> dict:
    meta = result.meta
    ops, kernels = result.ops_table, result.kernels_table
    return base_manifest(
        label=bundle_name_for(trace),
        source={"path": str(trace), "name": trace.name, "sha256": file_sha256(trace), "bytes": trace.stat().st_size},
        profiler=meta.profiler,
        device={"type": meta.device_type, "name": meta.device_name, "properties": meta.device_properties},
        framework_versions=meta.framework_versions,
        stats={
            "events_read": meta.events_read,
            "ops": n_rows(ops),
            "kernels": n_rows(kernels),
            "device_us_total": float(kernels["dur_us"].sum()) if n_rows(kernels) else 0.0,
            "read_seconds": round(fmt_seconds, 4),
        },
        trace_meta=meta.extra,
        rank=job_rank(meta.extra),  # one rank of a multi-rank job; None for a single-rank run
    )


def ingest(trace: Path, out_dir: Path, fmt: str | None = None, keep_raw: bool = True,
           taken: set[Path] = frozenset()) -> Path:
    """Read one trace and write its bundle under out_dir; returns the bundle path.

    taken: bundles already written by this run, which this one must not replace (two
    traces with one name get name and name-2)."""
    trace = Path(trace)
    check_output_dir(out_dir)  # a bad -o fails before the read
    t0 = time.perf_counter()
    result = read_trace(trace, fmt)
    elapsed = time.perf_counter() - t0
    dest = bundle_dest(out_dir, bundle_name_for(trace), taken)
    files = encode_tables(result.ops_table, result.kernels_table)  # all ready before the staged folder exists
    manifest = manifest_for(trace, result, elapsed)
    with staging(dest) as tmp:
        write_files(tmp, files)
        if keep_raw:
            (tmp / RAW).mkdir()
            shutil.copy2(trace, tmp / RAW / safe_raw_name(trace))
        write_manifest(tmp, manifest)
    return dest


def safe_raw_name(trace: Path) -> str:
    """The trace's file name for raw/, with control characters and separators replaced."""
    return _UNSAFE.sub("_", trace.name).lstrip(".") or "trace"


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
