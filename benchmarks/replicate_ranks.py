"""Build an N-rank job from one real rank's Kineto trace, clocks shifted, one rank slowed.

Every rank is a copy of the source rank (distributedInfo rank and world size rewritten), its
timestamps moved by rank * --clock-step-us (the hosts' clocks disagree by that much), so
porter must align clocks on collective ends to see anything. With --slow-rank R --slow-op OP
--delay-us D, rank R's first kernel of OP (from --after-us into the trace, before a collective)
runs D longer and all its device work after it starts D later; every other rank waits D
longer in the next collective kernel and its device work after that starts D later, so all
ranks leave that collective together, as NCCL makes them. The expected answer is then
known: straggler R, op OP, the others waiting D at that collective.

Usage: python benchmarks/replicate_ranks.py SRC OUT_DIR -n 8 [--slow-rank 5 --slow-op aten::mm --delay-us 2000]
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEVICE_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})


@dataclass(frozen=True)
class Planted:
    rank: int
    op: str
    delay_us: float
    collective: str  # the collective annotation whose kernel the others wait in


def _load(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rt") if path.suffix == ".gz" else open(path) as fh:
        return json.load(fh)


def _device(events: list[dict]) -> list[dict]:
    return sorted((e for e in events if e.get("cat") in DEVICE_CATS and "ts" in e), key=lambda e: e["ts"])


def _plant_points(events: list[dict], op: str, after_us: float) -> tuple[dict, dict]:
    """The first kernel launched by `op` from after_us on, and the first NCCL kernel after it."""
    by_corr = {}
    for e in events:  # runtime launches nested in the op: the op's kernels share their correlation
        if e.get("cat") == "cuda_runtime":
            by_corr[(e.get("args") or {}).get("correlation")] = e
    ops = [e for e in events if e.get("cat") == "cpu_op" and e.get("name") == op]
    dev = _device(events)
    t0 = min(e["ts"] for e in events if "ts" in e)
    for k in dev:
        launch = by_corr.get((k.get("args") or {}).get("correlation"))
        if launch is None or k["ts"] - t0 < after_us or "nccl" in k["name"].lower():
            continue
        if any(o["ts"] <= launch["ts"] <= o["ts"] + o["dur"] for o in ops):
            coll = next((c for c in dev if c["ts"] >= k["ts"] + k["dur"] and "nccl" in c["name"].lower()), None)
            if coll is not None:
                return k, coll
    raise SystemExit(f"no kernel of {op} before a collective after {after_us} us")


def _delay_from(events: list[dict], at: dict, delay: float, stretch: bool) -> None:
    """Device events starting after `at` start `delay` later; `at` itself lasts `delay` longer
    when stretch; the step ranges cover the delay."""
    for e in events:
        if e.get("cat") in DEVICE_CATS and e is not at and e.get("ts", -1) > at["ts"]:
            e["ts"] += delay
        if e.get("name", "").startswith("ProfilerStep#"):
            e["dur"] += delay
    if stretch:
        at["dur"] += delay


def build(src: Path, out_dir: Path, n: int, clock_step_us: float = 1_370_000.0, slow_rank: int | None = None,
          slow_op: str = "aten::mm", delay_us: float = 2000.0, after_us: float = 0.0) -> Planted | None:
    """Write rank-0..n-1.json.gz under out_dir; the planted straggler, when asked for."""
    doc = _load(src)
    out_dir.mkdir(parents=True, exist_ok=True)
    planted = None
    for r in range(n):
        d = copy.deepcopy(doc)
        d["distributedInfo"] = {**(d.get("distributedInfo") or {}), "rank": r, "world_size": n}
        ev = d["traceEvents"]
        if slow_rank is not None:
            kernel, coll = _plant_points(ev, slow_op, after_us)
            if r == slow_rank:
                _delay_from(ev, kernel, delay_us, stretch=True)
            else:
                _delay_from(ev, coll, delay_us, stretch=True)
            planted = Planted(slow_rank, slow_op, delay_us, coll["name"])
        for e in ev:
            if "ts" in e and e.get("ph") != "M":
                e["ts"] += r * clock_step_us
        with gzip.open(out_dir / f"rank-{r}.json.gz", "wt", compresslevel=1) as fh:
            json.dump(d, fh)
    return planted


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("src", type=Path)
    p.add_argument("out_dir", type=Path)
    p.add_argument("-n", type=int, default=8)
    p.add_argument("--clock-step-us", type=float, default=1_370_000.0)
    p.add_argument("--slow-rank", type=int)
    p.add_argument("--slow-op", default="aten::mm")
    p.add_argument("--delay-us", type=float, default=2000.0)
    p.add_argument("--after-us", type=float, default=0.0)
    a = p.parse_args(argv)
    print(build(a.src, a.out_dir, a.n, a.clock_step_us, a.slow_rank, a.slow_op, a.delay_us, a.after_us))


if __name__ == "__main__":
    main()
