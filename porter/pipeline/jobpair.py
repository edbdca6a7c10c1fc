"""Two multi-rank jobs diagnosed against each other: `porter diagnose --from JOB --to JOB`.

Ranks pair by rank id. Each rank pair is an ordinary diagnosis (DIR/rank-N/, with its reports
and fix plan); the job's own view (porter.analysis.jobview: per-rank step, compute, exposed
communication, idle, each collective's wait and transfer, the straggler) is taken on both sides
and compared, collectives as their own class matched by (kind, order of that kind). A
collective's time on a rank is the rank's wait for the last arrival plus the transfer, and the
two have different fixes (the straggler's own op, or the collective library), so the job's
summary splits the collective gap into the two before it names a fix.

Written: DIR/source and DIR/target (the two job bundles), DIR/rank-N/ per rank, DIR/job.json
and DIR/job.md (written last, staged and renamed).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from porter.analysis.jobview import JobView, JobCollective
from porter.bundles.bundle import load_bundle
from porter.bundles.job import is_job, job_trace_files, load_job_manifest, rank_dir
from porter.core.atomic import atomic_write_text, check_output_dir
from porter.core.errors import PorterError
from porter.core.units import fmt_ratio, fmt_us
from porter.pipeline.job import ingest_job, view_job

JOB_DIAGNOSIS = "job.json"
JOB_SUMMARY = "job.md"
FORMAT = "porter-job-diagnosis/1"
Progress = Callable[[str], None]
JOB_STAGES = ("reading the source job", "reading the target job", "rank", "comparing the jobs")


@dataclass(frozen=True)
class CollectivePair:
    """One collective (kind, order of that kind) on both jobs; per-rank means."""

    kind: str
    kind_seq: int
    source_bytes: float
    target_bytes: float
    source_wait_us: float
    target_wait_us: float
    source_transfer_us: float
    target_transfer_us: float
    source_bus_gbps: float | None
    target_bus_gbps: float | None
    source_last_rank: int
    target_last_rank: int

    @property
    def transfer_ratio(self) -> float | None:
        return self.target_transfer_us / self.source_transfer_us if self.source_transfer_us > 0 else None


def pair_collectives(source: JobView, target: JobView) -> tuple[list[CollectivePair], list[str]]:
    """Collectives recorded on both jobs, in the source's order; the ones only one side has, named."""
    def key(c: JobCollective) -> tuple[str, int]:
        return (c.kind, c.kind_seq)

    tgt = {key(c): c for c in target.collectives}
    src_keys = {key(c) for c in source.collectives}
    pairs = [CollectivePair(s.kind, s.kind_seq, s.bytes, t.bytes, s.wait_us, t.wait_us, s.transfer_us, t.transfer_us,
                            s.bus_gbps, t.bus_gbps, s.last_rank, t.last_rank)
             for s in source.collectives if (t := tgt.get(key(s))) is not None]
    only = [f"{k}#{q} only on the source" for k, q in (key(c) for c in source.collectives) if (k, q) not in tgt]
    only += [f"{k}#{q} only on the target" for k, q in tgt if (k, q) not in src_keys]
    return pairs, only


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def _side(view: JobView) -> dict[str, Any]:
    ranks = view.ranks
    return {
        "world_size": view.world_size,
        "step_us": max(r.step_us for r in ranks),  # the job waits for its slowest rank
        "mean_rank_step_us": _mean([r.step_us for r in ranks]),
        "compute_us": _mean([r.compute_us for r in ranks]),
        "communication_us": _mean([r.communication_us for r in ranks]),
        "exposed_us": _mean([r.exposed_us for r in ranks]),
        "idle_us": _mean([r.idle_us for r in ranks]),
        "wait_us": _mean([r.wait_us for r in ranks]),
        "straggler": asdict(view.straggler) if view.straggler else None,
        "findings": list(view.findings),
    }


def _class_rollup(docs: list[dict]) -> list[dict[str, Any]]:
    """Per op class, each side's time summed over the ranks' diagnoses, then per rank."""
    tot: dict[str, list[float]] = {}
    for d in docs:
        for row in d.get("by_class") or []:
            t = tot.setdefault(str(row.get("key")), [0.0, 0.0])
            t[0] += float(row.get("source_us") or 0.0)
            t[1] += float(row.get("target_us") or 0.0)
    n = max(len(docs), 1)
    rows = [{"op_class": k, "source_us": s / n, "target_us": t / n, "delta_us": (t - s) / n,
             "ratio": t / s if s > 0 and t > 0 else None} for k, (s, t) in tot.items()]
    return sorted(rows, key=lambda r: -abs(r["delta_us"]))


def _fix_rollup(docs: list[dict], waiting_for: int | None) -> list[dict[str, Any]]:
    """The ranks' fixes by catalogue id: on how many ranks each applies and what it closes there
    (per rank, mean over the ranks it applies on). When the job's collective gap is waiting for
    one rank (waiting_for), that rank's fixes come first and the collective fixes last, marked:
    a faster collective cannot shorten a wait for data that is not there yet."""
    by_id: dict[str, dict[str, Any]] = {}
    for rank, d in enumerate(docs):
        for f in d.get("fixes") or []:
            fid = str(f.get("fix_id") or f.get("id") or f.get("title"))
            e = by_id.setdefault(fid, {"fix_id": fid, "title": f.get("catalogue_title") or f.get("title"),
                                       "kind": f.get("kind"), "op_classes": sorted(set(f.get("op_classes") or [])),
                                       "ranks": [], "closes_us": []})
            if rank not in e["ranks"]:
                e["ranks"].append(rank)
                e["closes_us"].append(float(f.get("closes_gap_us") or 0.0))
    rows = []
    for e in by_id.values():
        row = {**{k: v for k, v in e.items() if k != "closes_us"}, "closes_us_per_rank": _mean(e["closes_us"]), "note": ""}
        if waiting_for is not None and e["op_classes"] == ["collective"]:
            row["note"] = (f"the collective gap is waiting for rank {waiting_for}, not transfer: "
                           f"fix rank {waiting_for} first")
        elif waiting_for is not None and waiting_for in e["ranks"]:
            row["note"] = f"on the straggler, rank {waiting_for}: what the other ranks wait for"
        rows.append(row)

    def order(r: dict[str, Any]) -> tuple[int, float]:
        tier = 1 if not r["note"] else (0 if r["note"].startswith("on the straggler") else 2)
        return (tier, -r["closes_us_per_rank"] * len(r["ranks"]))

    return sorted(rows, key=order)


def waiting_and_transfer(source: JobView, target: JobView, pairs: list[CollectivePair]) -> tuple[float, float]:
    """The collective gap per rank per step, split: more waiting for the last rank, and more transfer."""
    wait = _mean([r.wait_us for r in target.ranks]) - _mean([r.wait_us for r in source.ranks])
    return wait, sum(p.target_transfer_us - p.source_transfer_us for p in pairs)


def waiting_for(source: JobView, target: JobView, pairs: list[CollectivePair]) -> int | None:
    """The target's straggler, when waiting for it is most of the collective gap."""
    wait, transfer = waiting_and_transfer(source, target, pairs)
    return target.straggler.rank if target.straggler is not None and wait > abs(transfer) else None


def communication_finding(source: JobView, target: JobView, pairs: list[CollectivePair]) -> str:
    """What the collective gap is: waiting for a late rank, or the transfer itself."""
    n = max(len(source.ranks), 1)
    wait, transfer = waiting_and_transfer(source, target, pairs)
    comm = (sum(r.communication_us for r in target.ranks) - sum(r.communication_us for r in source.ranks)) / n
    text = (f"collectives {comm:+.1f} us per rank per step: waiting for the last rank {wait:+.1f} us, "
            f"transfer {transfer:+.1f} us over {len(pairs)} matched collectives")
    s = target.straggler
    if waiting_for(source, target, pairs) is not None and s is not None:
        text += (f"; mostly waiting: the target's straggler is rank {s.rank} (behind in {s.op}, the others wait "
                 f"{s.caused_us:.1f} us for it), so fix rank {s.rank}'s {s.op} before tuning the collectives")
    elif transfer > 0:
        text += "; mostly transfer: the collective library moves the same bytes slower (see the collective fixes)"
    return text


def rank_count(path: Path) -> int:
    """How many ranks a job holds, before any is read: a job bundle's manifest, else its trace files."""
    return len(load_job_manifest(path)["ranks"]) if is_job(path) else len(job_trace_files(path))


def _job_bundle(spec: Path, into: Path, engine: str, address: str | None) -> Path:
    """A job bundle for one side: the one given, or a directory of rank traces ingested into `into`."""
    if is_job(spec):
        return spec
    staging = into.parent / f".{into.name}-ingest"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        dest, _ = ingest_job(spec, staging, engine=engine, address=address)
        if into.exists():
            shutil.rmtree(into)
        dest.rename(into)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return into


def diagnose_jobs(source: Path, target: Path, out_dir: Path, *, engine: str = "local", address: str | None = None,
                  catalogue: Any = None, report: bool = True, progress: Progress = lambda msg: None,
                  command: str | None = None) -> Path:
    """Both jobs read and checked, every rank pair diagnosed, the jobs compared; returns DIR/job.json."""
    from porter.pipeline.diagnose import diagnose

    out_dir = Path(out_dir)
    n_src, n_tgt = rank_count(Path(source)), rank_count(Path(target))
    if n_src != n_tgt:
        raise PorterError(f"the jobs do not pair rank for rank: {n_src} ranks on the source, {n_tgt} on the target",
                          path=target, hint="diagnose one rank against one rank (pass each rank's trace), or record "
                                            "both jobs at the same world size")
    check_output_dir(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    progress("reading the source job")
    src_job = _job_bundle(Path(source), out_dir / "source", engine, address)
    progress("reading the target job")
    tgt_job = _job_bundle(Path(target), out_dir / "target", engine, address)
    src_ranks = [int(r["rank"]) for r in load_job_manifest(src_job)["ranks"]]
    tgt_ranks = [int(r["rank"]) for r in load_job_manifest(tgt_job)["ranks"]]
    if sorted(src_ranks) != sorted(tgt_ranks):
        raise PorterError(f"the jobs do not pair rank for rank: {len(src_ranks)} ranks on the source, "
                          f"{len(tgt_ranks)} on the target", path=target,
                          hint="diagnose one rank against one rank (pass each rank's trace), or record both "
                               "jobs at the same world size")
    _, src_view = view_job(src_job, engine=engine, address=address)
    _, tgt_view = view_job(tgt_job, engine=engine, address=address)
    src_times, tgt_times = {t.rank: t for t in src_view.ranks}, {t.rank: t for t in tgt_view.ranks}
    docs, ranks = [], []
    for r in sorted(src_ranks):
        progress(f"rank {r}: diagnosing")
        _, dest = diagnose(load_bundle(src_job / rank_dir(r)), load_bundle(tgt_job / rank_dir(r)), out_dir / rank_dir(r),
                           catalogue=catalogue, report=report, keep_analysis=False,
                           command=f"{command} (rank {r})" if command else None)
        doc = json.loads(dest.read_text())
        docs.append(doc)
        s, t = src_times[r], tgt_times[r]
        ranks.append({"rank": r, "diagnosis": rank_dir(r), "source_step_us": s.step_us, "target_step_us": t.step_us,
                      "ratio": t.step_us / s.step_us if s.step_us > 0 else None,
                      "source_exposed_us": s.exposed_us, "target_exposed_us": t.exposed_us,
                      "source_wait_us": s.wait_us, "target_wait_us": t.wait_us,
                      "headline_ratio": (doc.get("headline") or {}).get("ratio")})
    progress("comparing the jobs")
    pairs, only = pair_collectives(src_view, tgt_view)
    src_side, tgt_side = _side(src_view), _side(tgt_view)
    payload = {
        "format": FORMAT,
        "command": command,
        "world_size": len(src_ranks),
        "source": {"job": str(src_job), **src_side},
        "target": {"job": str(tgt_job), **tgt_side},
        "job": {"source_step_us": src_side["step_us"], "target_step_us": tgt_side["step_us"],
                "ratio": tgt_side["step_us"] / src_side["step_us"] if src_side["step_us"] > 0 else None},
        "ranks": ranks,
        "by_class": _class_rollup(docs),
        "collectives": [{**asdict(p), "transfer_ratio": p.transfer_ratio} for p in pairs],
        "collectives_one_sided": only,
        "communication": communication_finding(src_view, tgt_view, pairs),
        "fixes": _fix_rollup(docs, waiting_for(src_view, tgt_view, pairs)),
    }
    atomic_write_text(out_dir / JOB_SUMMARY, job_markdown(payload))
    return atomic_write_text(out_dir / JOB_DIAGNOSIS, json.dumps(payload, indent=1, default=str))


def job_lines(p: dict[str, Any]) -> list[str]:
    """The job pair in plain lines: the terminal's summary and job.md's body."""
    j = p["job"]
    lines = [f"job of {p['world_size']} ranks: step {fmt_us(j['source_step_us'])} -> {fmt_us(j['target_step_us'])} "
             f"({fmt_ratio(j['ratio'])}; the job's step is its slowest rank's)"]
    for side in ("source", "target"):
        s = p[side]
        who = (f"straggler rank {s['straggler']['rank']} (behind in {s['straggler']['op']})" if s["straggler"]
               else "no straggler")
        lines.append(f"  {side}: per rank compute {fmt_us(s['compute_us'])}, communication {fmt_us(s['communication_us'])} "
                     f"(exposed {fmt_us(s['exposed_us'])}), idle {fmt_us(s['idle_us'])}, waiting {fmt_us(s['wait_us'])}; {who}")
    lines.append("  " + p["communication"])
    worst = sorted(p["ranks"], key=lambda r: -(r["ratio"] or 0.0))[:3]
    lines.append("  slowest ranks on the target (step ratio): " + ", ".join(
        f"rank {r['rank']} {fmt_ratio(r['ratio'])}" for r in worst))
    cls = [c for c in p["by_class"] if c["delta_us"]][:4]
    lines.append("  by op class (per rank): " + ", ".join(f"{c['op_class']} {c['delta_us']:+.1f} us" for c in cls))
    for f in [f for f in p["fixes"] if f["kind"] != "accuracy"][:3]:
        lines.append(f"  fix: {f['title']} on {len(f['ranks'])} of {p['world_size']} ranks, closes "
                     f"{fmt_us(f['closes_us_per_rank'])} per rank" + (f" ({f['note']})" if f["note"] else ""))
    return lines


def job_markdown(p: dict[str, Any]) -> str:
    rows = "\n".join(f"| {r['rank']} | {fmt_us(r['source_step_us'])} | {fmt_us(r['target_step_us'])} | {fmt_ratio(r['ratio'])} "
                     f"| {fmt_us(r['source_exposed_us'])} | {fmt_us(r['target_exposed_us'])} | {fmt_us(r['source_wait_us'])} "
                     f"| {fmt_us(r['target_wait_us'])} | [{r['diagnosis']}]({r['diagnosis']}/report.md) |" for r in p["ranks"])
    coll = "\n".join(f"| {c['kind']}#{c['kind_seq']} | {c['source_bytes']:.0f} | {fmt_us(c['source_wait_us'])} | "
                     f"{fmt_us(c['target_wait_us'])} | {fmt_us(c['source_transfer_us'])} | {fmt_us(c['target_transfer_us'])} | "
                     f"{fmt_ratio(c['transfer_ratio'])} | {c['target_last_rank']} |" for c in p["collectives"])
    body = "\n".join(f"- {line.strip()}" for line in job_lines(p))
    return (f"# Job diagnosis: {p['world_size']} ranks\n\n{body}\n\n## Ranks (each rank's diagnosis linked)\n\n"
            "| rank | source step | target step | ratio | source exposed comm | target exposed comm | source waiting "
            "| target waiting | diagnosis |\n|---|---|---|---|---|---|---|---|---|\n" + rows +
            "\n\n## Collectives (matched by kind and order; per-rank means)\n\n| collective | bytes | source wait | "
            "target wait | source transfer | target transfer | transfer ratio | target's last rank |\n"
            "|---|---|---|---|---|---|---|---|\n" + coll + "\n")
