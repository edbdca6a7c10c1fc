"""A multi-rank job on disk: a directory of one bundle per rank (rank-0/, rank-1/ ...) under a
job manifest (manifest.json with kind "job": world size, backend, process groups, ranks).

The job directory is staged and renamed as a whole (porter.bundles.bundle.staging), so a
directory whose ranks do not make one job (porter.core.jobranks) leaves nothing behind.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from porter.bundles.bundle import MANIFEST, RAW, base_manifest, load_manifest, write_manifest, write_tables
from porter.bundles.ingest import manifest_for, safe_raw_name
from porter.core.errors import BundleError
from porter.core.jobranks import JobError, JobRanks, RankFile
from profilers.base import ReadResult

JOB_KIND = "job"
_TRACE_ENDINGS = (".json", ".json.gz", ".pb", ".pt.trace.json", ".pt.trace.json.gz")


def rank_dir(rank: int) -> str:
    return f"rank-{rank}"


def is_job(path: Path) -> bool:
    """A job bundle porter wrote (its manifest says kind "job")."""
    try:
        return json.loads((Path(path) / MANIFEST).read_text()).get("kind") == JOB_KIND
    except (OSError, ValueError, AttributeError):
        return False


def job_trace_files(directory: Path) -> list[Path]:
    """The trace files of a job directory (by their endings; other files, hidden ones and
    subdirectories are not ranks), sorted by name."""
    directory = Path(directory)
    files = sorted(p for p in directory.iterdir()
                   if p.is_file() and not p.name.startswith(".") and p.name.lower().endswith(_TRACE_ENDINGS))
    if not files:
        raise JobError("no trace files (*.json, *.json.gz, *.pb) in the directory", path=directory)
    return files


def with_rank(result: ReadResult, rank: int) -> ReadResult:
    """The tables with every row's rank set (a rank named by its file only: the reader wrote -1)."""
    ops, kernels = dict(result.ops_table), dict(result.kernels_table)
    ops["rank"] = np.full(len(ops["op_id"]), rank, dtype=np.int64)
    kernels["rank"] = np.full(len(kernels["op_id"]), rank, dtype=np.int64)
    return ReadResult(ops, kernels, result.meta)


def write_rank_bundle(dest: Path, trace: Path, result: ReadResult, rank: RankFile, seconds: float,
                      keep_raw: bool = True) -> dict[str, Any]:
    """One rank's bundle at dest (inside a staged job directory); returns its manifest."""
    dest.mkdir()
    write_tables(dest, result.ops_table, result.kernels_table)
    if keep_raw:
        (dest / RAW).mkdir()
        shutil.copy2(trace, dest / RAW / safe_raw_name(trace))
    manifest = manifest_for(trace, result, seconds)
    manifest.update(rank=rank.rank, rank_from=rank.rank_from, world_size=rank.world_size)
    manifest["trace_meta"] = {**manifest.get("trace_meta", {}), "rank": rank.rank}
    write_manifest(dest, manifest)
    return manifest


def write_job_manifest(dest: Path, job: JobRanks, label: str) -> None:
    write_manifest(dest, base_manifest(kind=JOB_KIND, label=label, **job.manifest(),
                                       ranks=[{"rank": f.rank, "bundle": rank_dir(f.rank), "source": f.path.name,
                                               "rank_from": f.rank_from} for f in job.files]))


def load_job_manifest(path: Path) -> dict[str, Any]:
    """A job bundle's manifest, with every rank's bundle present; one line when one is missing."""
    manifest = load_manifest(path)
    if manifest.get("kind") != JOB_KIND:
        raise BundleError("not a job bundle (its manifest has no kind \"job\")", path=path)
    for r in manifest.get("ranks") or []:
        if not (Path(path) / str(r.get("bundle")) / MANIFEST).is_file():
            raise BundleError(f"rank {r.get('rank')}'s bundle {r.get('bundle')}/ is missing", path=path,
                              hint="re-ingest the job's traces")
    return manifest
