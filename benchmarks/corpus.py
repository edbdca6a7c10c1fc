"""Ingest every trace of the real corpus and print one Markdown row per trace.

Run: python benchmarks/corpus.py [CORPUS_DIR]   (default $PORTER_TRACE_CORPUS or ../shared/traces)

Columns: events read, ops, kernels, share of device time owned by real (non-synthetic)
ops, share classed `other`, and ingest time (best of 3: reader + validation + bundle write).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from porter.bundles.bundle import load_bundle
from porter.bundles.ingest import ingest

PATTERNS = ("kineto/*.json.gz", "xplane/*.xplane.pb", "rocprof/*.json.gz")


def row(trace: Path) -> str:
    best = float("inf")
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(3):
            t0 = time.perf_counter()
            dest = ingest(trace, Path(tmp))
            best = min(best, time.perf_counter() - t0)
        b = load_bundle(dest)
    ops, total = b.ops, float(b.ops["device_us"].sum())
    real = float(ops.loc[~ops["synthetic"], "device_us"].sum())
    other = float(ops.loc[ops["op_class"] == "other", "device_us"].sum())
    pct = (lambda x: f"{100 * x / total:.1f}%") if total else (lambda x: "-")
    return (f"| {trace.parent.name}/{trace.name} | {b.manifest['device']['name'] or b.manifest['device']['type']} "
            f"| {b.manifest['stats']['events_read']:,} | {len(ops):,} | {len(b.kernels):,} | {pct(real)} | {pct(other)} | {best:.2f} s |")


def main() -> None:
    default = os.environ.get("PORTER_TRACE_CORPUS", str(Path(__file__).resolve().parents[2] / "shared" / "traces"))
    corpus = Path(sys.argv[1] if len(sys.argv) > 1 else default)
    print("| trace | device | events | ops | kernels | time on real ops | `other` | ingest |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for pattern in PATTERNS:
        for trace in sorted(corpus.glob(pattern)):
            print(row(trace), flush=True)


if __name__ == "__main__":
    main()
