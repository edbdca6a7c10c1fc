"""`porter show JOB --by rank` per engine: the same job's view serially, on the local process
pool, and on Ray when it is installed; the views must be identical.

The job: one corpus rank replicated to --events events (benchmarks/replicate.py), then to
-n ranks with shifted clocks and one planted straggler (benchmarks/replicate_ranks.py).

Usage: python benchmarks/multirank.py [-n 8] [--events 100000] [--repeats 2] [--workers 2]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from benchmarks.replicate import copies_for, replicate
from benchmarks.replicate_ranks import build
from porter.pipeline.job import view_job

SOURCE = Path(os.environ.get("PORTER_TRACE_CORPUS", Path(__file__).resolve().parents[2] / "shared" / "traces")) \
    / "multirank" / "v100_dlrm_8rank" / "rank-0.json.gz"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=8)
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    args = ap.parse_args(argv)
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
