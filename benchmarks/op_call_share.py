"""Share of each side's per-step time paired op call by op call (a script, not a test).

For each library model x target (tests/models/library_models.py), capture both sides live,
align them by identity and print, from alignment.op_calls: the share of each side's time in
rows with evidence ``identity-call`` and in ``fused-share`` rows, and the number of rows.

    .venv/bin/python -m benchmarks.op_call_share [--models bert_small,...] [--targets xla,...] [--keep DIR]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

LIBRARY = Path(__file__).resolve().parents[1] / "tests" / "models" / "library_models.py"
MODELS = ("bert_small", "gpt2_small", "small_resnet")
TARGETS = ("xla", "cpu:inductor", "cpu:ort")


def shares(model: str, target: str, work: Path, sources: dict) -> dict[str, float]:
    """Capture (the source once per model), analyse, and read the op-call shares."""
    from porter.bundle import load_bundle
    from porter.capture.options import CaptureOptions
    from porter.capture.run import capture
    from porter.diagnose import analyse

    opts = CaptureOptions(steps=5, warmup=1, repeats=2, activations=False)
    if model not in sources:
        capture(f"{LIBRARY}:{model}", "cpu", work / f"{model}-cpu", opts)
        sources[model] = load_bundle(work / f"{model}-cpu")
    dest = work / f"{model}-{target.replace(':', '_')}"
    capture(f"{LIBRARY}:{model}", target, dest, opts)
    al = analyse(sources[model], load_bundle(dest)).alignment
    calls, stats = al.op_calls, al.stats
    fused = calls.loc[calls["evidence"] == "fused-share"] if calls is not None else None

    fused_frac = float(fused["target_us"].sum()) / max(float(calls["target_us"].sum()), 1e-9) if fused is not None and len(calls) else 0.0
    return {"src_identity": stats.get("source_op_calls_identity_share", 0.0),
            "tgt_identity": stats.get("target_op_calls_identity_share", 0.0),
            "tgt_fused": fused_frac,
            "rows": int(stats.get("op_calls", 0))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--keep", default="")
    a = ap.parse_args()
    work = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="porter-opcalls-"))
    work.mkdir(parents=True, exist_ok=True)
    sources: dict = {}
    print(f"{'model':14} {'target':13} {'src id':>7} {'tgt id':>7} {'fused':>9} {'rows':>5}")
    for model in a.models.split(","):
        for target in a.targets.split(","):
            r = shares(model, target, work, sources)
            print(f"{model:14} {target:13} {r['src_identity']:7.3f} {r['tgt_identity']:7.3f} "
                  f"{r['tgt_fused']:9.3f} {r['rows']:5d}", flush=True)


if __name__ == "__main__":
    main()
