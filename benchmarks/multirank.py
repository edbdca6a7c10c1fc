"""`porter show JOB --by rank` per engine: the same job's view serially, on the local process
pool, and on Ray when it is installed; the views must be identical.

The job: one corpus rank replicated to --events events (benchmarks/replicate.py), then to
-n ranks with shifted clocks and one planted straggler (benchmarks/replicate_ranks.py).

Usage: python benchmarks/multirank.py [-n 8] [--events 100000] [--repeats 2] [--workers 2]
       python benchmarks/multirank.py --per-rank 1000000 [--ranks 1024] [--workers 2]

--per-rank N measures one rank of N events as a worker handles it, in a fresh process (read,
summarise: wall time, peak RSS, the pickled result's bytes, which is all that travels) and
projects a job of --ranks such ranks from it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.replicate import copies_for, replicate
from benchmarks.replicate_ranks import build
from porter.pipeline.job import view_job

SOURCE = Path(os.environ.get("PORTER_TRACE_CORPUS", Path(__file__).resolve().parents[2] / "shared" / "traces")) \
    / "multirank" / "v100_dlrm_8rank" / "rank-0.json.gz"


ONE_RANK = """
import json, pickle, resource, sys, time
from pathlib import Path
from porter.pipeline.job import RankTask, rank_task
t0 = time.perf_counter()
result = rank_task(RankTask(Path(sys.argv[1])))
seconds = time.perf_counter() - t0
print(json.dumps({"seconds": seconds, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "result_bytes": len(pickle.dumps(result))}))
"""


def per_rank(events: int, ranks: int, workers: int, repeats: int) -> None:
    """One rank of `events` events as a worker reads it, and a `ranks`-rank job projected from it."""
    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / "rank-0.json.gz"
        replicate(SOURCE, big, copies_for(SOURCE, events))
        runs = [json.loads(subprocess.run([sys.executable, "-c", ONE_RANK, str(big)], capture_output=True, text=True,
                                          check=True).stdout) for _ in range(repeats)]
        best = min(runs, key=lambda r: r["seconds"])
        print(f"one rank: >= {events} events, {big.stat().st_size / 1e6:.1f} MB gzipped: {best['seconds']:.2f} s "
              f"(best of {repeats}), peak RSS {max(r['peak_rss_mb'] for r in runs):.0f} MB, "
              f"result {best['result_bytes'] / 1e3:.1f} kB")
        total = ranks * best["seconds"]
        print(f"{ranks} ranks: {total / workers / 60:.1f} min on {workers} workers ({total / 3600:.1f} worker-hours); "
              f"peak memory per worker {max(r['peak_rss_mb'] for r in runs):.0f} MB (one rank at a time); "
              f"{ranks * best['result_bytes'] / 1e6:.1f} MB of summaries to the driver")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=8)
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--per-rank", type=int, default=0, help="measure one rank of N events and project --ranks of them")
    ap.add_argument("--ranks", type=int, default=1024)
    args = ap.parse_args(argv)
    if args.per_rank:
        return per_rank(args.per_rank, args.ranks, args.workers, args.repeats)
    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / "rank.json.gz"
        replicate(SOURCE, big, copies_for(SOURCE, args.events))
        build(big, Path(tmp) / "job", args.n, slow_rank=args.n // 2, delay_us=2000.0)
        size = sum(p.stat().st_size for p in (Path(tmp) / "job").iterdir())
        print(f"job: {args.n} ranks of >= {args.events} events, {size / 1e6:.1f} MB gzipped")
        views, engines = {}, ["serial", "local"]
        try:
            import ray  # noqa: F401
            engines.append("ray")
        except ImportError:
            pass
        for engine in engines:
            best = float("inf")
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                _, views[engine] = view_job(Path(tmp) / "job", engine=engine, workers=args.workers)
                best = min(best, time.perf_counter() - t0)
            print(f"{engine:>6}: {best:.2f} s (best of {args.repeats}), straggler rank {views[engine].straggler.rank}")
        assert all(v == views["serial"] for v in views.values()), "engines disagree"
        print("views identical on every engine")


if __name__ == "__main__":
    main()
