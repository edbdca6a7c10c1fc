"""A multi-rank job end to end: a directory of rank traces (or a job bundle) -> checked ranks ->
per-rank summaries on the engine -> the job's view; or the traces -> a job bundle on disk.

Per-rank work (read, summarise, write the rank's bundle) runs in the engine's workers
(porter/pipeline/engine.py); the ranks are checked as one job (porter.core.jobranks) only
when every summary is back, before anything is renamed into place.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

from porter.analysis.jobview import JobView, job_view
from porter.analysis.ranksummary import RankSummary, rank_summary
from porter.bundles.bundle import Bundle, load_bundle, run_of, staging
from porter.core.atomic import check_output_dir
from porter.bundles.ingest import bundle_dest, manifest_for
from porter.bundles.job import (is_job, job_trace_files, load_job_manifest, rank_dir, with_rank, write_job_manifest,
                                write_rank_bundle)
from porter.core.jobranks import JobRanks, RankFile, check_job, rank_file
from porter.pipeline.engine import run_tasks
from profilers.detect import read_trace


@dataclass(frozen=True)
class RankTask:
    path: Path  # a rank's trace, or its bundle inside a job bundle
    fmt: str | None = None
    write_to: Path | None = None  # ingest: where (inside the staged job) to write the rank's bundle


@dataclass(frozen=True)
class RankResult:
    file: RankFile
    summary: RankSummary
    written: Path | None


def rank_task(task: RankTask) -> RankResult:
    """One rank: read it (a trace or a rank bundle), name its rank, summarise it, and for an
    ingest write its bundle. Module-level: the engines pickle it."""
    if task.write_to is None and (task.path / "manifest.json").is_file():
        b = load_bundle(task.path)
        meta = b.manifest.get("trace_meta") or {}
        rf = rank_file(Path(b.manifest.get("source", {}).get("name") or task.path.name), meta)
        return RankResult(rf, rank_summary(run_of(b, "job"), rf.world_size or 0), None)
    t0 = time.perf_counter()
    result = read_trace(task.path, task.fmt)
    rf = rank_file(task.path, result.meta.extra)
    if rf.rank_from != "distributedInfo":
        result = with_rank(result, rf.rank)
    seconds = time.perf_counter() - t0
    manifest = manifest_for(task.path, result, seconds)
    manifest["trace_meta"] = {**manifest.get("trace_meta", {}), "rank": rf.rank}
    bundle = Bundle(path=task.path, manifest=manifest, ops=result.ops, kernels=result.kernels)
    run = dataclasses.replace(run_of(bundle, "job"), rank=rf.rank)
    written = None
    if task.write_to is not None:
        write_rank_bundle(task.write_to, task.path, result, rf, seconds)
        written = task.write_to
    return RankResult(rf, rank_summary(run, rf.world_size or 0), written)


def _checked(results: list[RankResult], where: Path) -> tuple[JobRanks, list[RankSummary]]:
    job = check_job([r.file for r in results], where)
    summaries = [dataclasses.replace(r.summary, world_size=job.world_size) for r in results]
    return job, sorted(summaries, key=lambda s: s.rank)


def job_tasks(path: Path, fmt: str | None = None) -> list[RankTask]:
    """A job bundle's rank bundles, or a directory's trace files, as tasks."""
    path = Path(path)
    if is_job(path):
        manifest = load_job_manifest(path)
        return [RankTask(path / str(r["bundle"])) for r in manifest["ranks"]]
    return [RankTask(p, fmt) for p in job_trace_files(path)]


def read_job(path: Path, fmt: str | None = None, engine: str = "local", address: str | None = None,
             workers: int | None = None) -> tuple[JobRanks, list[RankSummary]]:
    """Every rank's summary of a job directory or job bundle, the ranks checked as one job."""
    results = run_tasks(rank_task, job_tasks(path, fmt), engine, address, workers)
    return _checked(results, Path(path))


def view_job(path: Path, fmt: str | None = None, engine: str = "local", address: str | None = None,
             workers: int | None = None) -> tuple[JobRanks, JobView]:
    job, summaries = read_job(path, fmt, engine, address, workers)
    return job, job_view(summaries)


def ingest_job(directory: Path, out_dir: Path, fmt: str | None = None, engine: str = "local",
               address: str | None = None, workers: int | None = None) -> tuple[Path, JobRanks]:
    """A directory of rank traces -> one job bundle under out_dir (named after the directory):
    each rank's bundle written by its worker into the staged job, which is renamed into place
    only once the ranks check out as one job."""
    directory = Path(directory)
    check_output_dir(out_dir)
    files = job_trace_files(directory)
    dest = bundle_dest(Path(out_dir), directory.resolve().name or "job")
    with staging(dest) as tmp:
        tasks = [RankTask(p, fmt, tmp / f".part-{i}") for i, p in enumerate(files)]
        results = run_tasks(rank_task, tasks, engine, address, workers)
        job, _ = _checked(results, directory)
        for r in results:
            r.written.rename(tmp / rank_dir(r.file.rank))
        write_job_manifest(tmp, job, directory.resolve().name)
    return dest, job
