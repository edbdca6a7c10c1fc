"""Which rank of which job each trace file of a directory holds, and whether they make one job.

A rank's identity comes from the trace first (Kineto's distributedInfo rank, world size,
backend, process groups) and from the file name second (`rank-3`, `trace_rank_3.json`,
`rank3`), for profilers that write no rank. A directory is one job only when every rank from 0
to world size - 1 is there exactly once, all ranks agree on the world size and backend, and
they recorded a common profiler step: anything else is one line naming the files, so that a
missing rank, a copied file or two jobs mixed in one directory never becomes a silent
half-analysis.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from porter.core.errors import PorterError

_RANK_IN_NAME = re.compile(r"(?:^|[^a-z0-9])rank[-_]?(\d+)(?!\d)", re.IGNORECASE)


class JobError(PorterError):
    """The trace files of a directory do not make one multi-rank job."""


def rank_from_name(name: str) -> int | None:
    """The rank a file name states by convention (`rank-N`, `*_rank_N*`, `rankN`), else None."""
    found = _RANK_IN_NAME.findall(name)
    return int(found[-1]) if found else None


@dataclass(frozen=True)
class RankFile:
    """One trace file's place in a job."""

    path: Path
    rank: int
    world_size: int | None  # None: the trace does not say (rank taken from the file name)
    rank_from: str  # "distributedInfo" or "file name"
    backend: str = ""
    steps: tuple[int, ...] = ()  # the ProfilerStep numbers recorded
    process_groups: tuple[Mapping[str, Any], ...] = field(default=(), repr=False)


def rank_file(path: Path, trace_meta: Mapping[str, Any]) -> RankFile:
    """A trace's rank from its metadata, else its file name; one line when neither says or
    the two disagree (a renamed or copied file)."""
    named = rank_from_name(Path(path).name)
    rank, world = trace_meta.get("rank"), trace_meta.get("world_size")
    steps = tuple(sorted({int(s[0]) for s in trace_meta.get("steps") or [] if s and s[0] >= 0}))
    groups = tuple(trace_meta.get("process_groups") or ())
    backend = str(trace_meta.get("backend") or "")
    if isinstance(rank, int) and isinstance(world, int) and not isinstance(rank, bool) and world >= 1:
        if not 0 <= rank < world:
            raise JobError(f"distributedInfo says rank {rank} of a world of {world}", path=path)
        if named is not None and named != rank:
            raise JobError(f"the file name says rank {named} but its distributedInfo says rank {rank}", path=path,
                           hint="a renamed or copied rank file")
        return RankFile(Path(path), rank, world, "distributedInfo", backend, steps, groups)
    if named is None:
        raise JobError("no rank: the trace has no distributedInfo and its name no rank-N", path=path,
                       hint="name each rank's file rank-N.json.gz")
    return RankFile(Path(path), named, None, "file name", backend, steps, groups)


@dataclass(frozen=True)
class JobRanks:
    """A checked job: its ranks in order and what they agree on."""

    files: tuple[RankFile, ...]  # sorted by rank, one per rank 0..world_size-1
    world_size: int
    backend: str
    steps: tuple[int, ...]  # the profiler steps every rank recorded

    def manifest(self) -> dict[str, Any]:
        groups = next((list(f.process_groups) for f in self.files if f.process_groups), [])
        return {"world_size": self.world_size, "backend": self.backend, "steps": list(self.steps),
                "process_groups": groups,
                "ranks_from": sorted({f.rank_from for f in self.files})}


def _names(files: Sequence[RankFile]) -> str:
    shown = ", ".join(f.path.name for f in files[:4])
    return shown + (f" and {len(files) - 4} more" if len(files) > 4 else "")


def check_job(files: Sequence[RankFile], where: Path | None = None) -> JobRanks:
    """The files as one job, or one line saying why they are not one: duplicate ranks,
    missing ranks, disagreeing world sizes or backends, or no profiler step in common."""
    if not files:
        raise JobError("no trace files", path=where)
    by_rank: dict[int, list[RankFile]] = {}
    for f in files:
        by_rank.setdefault(f.rank, []).append(f)
    worlds = {f.world_size for f in files if f.world_size is not None}
    if len(worlds) > 1:
        per = {w: [f for f in files if f.world_size == w] for w in sorted(worlds)}
        said = "; ".join(f"world {w}: {_names(fs)}" for w, fs in per.items())
        raise JobError(f"ranks of different jobs: {said}", path=where, hint="one job per directory")
    backends = {f.backend for f in files if f.backend}
    if len(backends) > 1:
        raise JobError(f"ranks of different jobs: backends {', '.join(sorted(backends))}", path=where,
                       hint="one job per directory")
    dup = {r: fs for r, fs in by_rank.items() if len(fs) > 1}
    if dup:
        r, fs = min(dup.items())
        raise JobError(f"rank {r} appears {len(fs)} times ({_names(fs)})", path=where,
                       hint="one file per rank; two jobs mixed in one directory?")
    world = worlds.pop() if worlds else max(by_rank) + 1
    if max(by_rank) >= world:
        raise JobError(f"rank {max(by_rank)} in a world of {world}", path=where)
    missing = [r for r in range(world) if r not in by_rank]
    if missing:
        shown = ", ".join(str(r) for r in missing[:8]) + (" ..." if len(missing) > 8 else "")
        raise JobError(f"{len(missing)} of {world} ranks missing: rank {shown}", path=where,
                       hint="every rank's trace is needed to find stragglers")
    if world < 2:
        raise JobError("one rank only: not a multi-rank job", path=where, hint="porter show FILE for one trace")
    stepped = [f for f in files if f.steps]
    common = set(stepped[0].steps).intersection(*(f.steps for f in stepped[1:])) if stepped else set()
    if stepped and not common:
        a = stepped[0]
        b = next(f for f in stepped if not set(f.steps) & set(a.steps))
        raise JobError(f"ranks of different runs: {a.path.name} recorded steps {_span(a.steps)}, "
                       f"{b.path.name} steps {_span(b.steps)}", path=where, hint="one job per directory")
    ordered = tuple(sorted(files, key=lambda f: f.rank))
    return JobRanks(ordered, world, backends.pop() if backends else "", tuple(sorted(common)))


def _span(steps: Sequence[int]) -> str:
    return str(steps[0]) if len(steps) == 1 else f"{steps[0]}-{steps[-1]}"


def is_job_path(path: str | Path) -> bool:
    """A job, by its shape on disk, without reading a trace: a job bundle (manifest kind "job"),
    or a directory of traces that is neither a bundle nor a diagnosis."""
    import json

    p = Path(path)
    if not p.is_dir():
        return False
    manifest = p / "manifest.json"
    if manifest.is_file():
        try:
            return json.loads(manifest.read_text()).get("kind") == "job"
        except (OSError, ValueError, AttributeError):
            return False
    return not (p / "diagnosis.json").is_file()
