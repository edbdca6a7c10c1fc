"""Share of each side's per-step time paired op call by op call (a script, not a test).

For each library model x target (tests/models/library_models.py), capture both sides live,
align them by identity and print, from alignment.op_calls: the share of each side's time in
rows with evidence ``identity-call`` (src id, tgt id), the target's ``fused-share`` time over all
its op-call time (fused), the share of each side's time in rows both sides ran, measured or
split by estimate (src pair, tgt pair), and the number of rows. ``--keep DIR`` keeps the
captures; run again with the same DIR, it analyses them anew without capturing.
``--no-call-members`` clears the target's ``ops.call_members`` before the analysis: each fused
op is then its root call's alone, as before fused ops listed their calls (an ablation on the
same captures).

    .venv/bin/python -m benchmarks.op_call_share [--models bert_small,...] [--targets xla,...] [--keep DIR]
        [--no-call-members]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

LIBRARY = Path(__file__).resolve().parents[1] / "tests" / "models" / "library_models.py"
MODELS = ("bert_small", "gpt2_small", "small_resnet")
TARGETS = ("xla", "cpu:inductor", "cpu:ort")


def shares(model: str, target: str, work: Path, sources: dict, call_members: bool = True) -> dict[str, float]:
    """Capture (the source once per model), analyse, and read the op-call shares."""
    from porter.bundles.bundle import load_bundle
    from porter.capture.options import CaptureOptions
    from porter.capture.run import capture
    from porter.pipeline.diagnose import analyse

    opts = CaptureOptions(steps=5, warmup=1, repeats=2, activations=False)
    if model not in sources and not (work / f"{model}-cpu" / "manifest.json").is_file():
        capture(f"{LIBRARY}:{model}", "cpu", work / f"{model}-cpu", opts)
    if model not in sources:
        sources[model] = load_bundle(work / f"{model}-cpu")
    dest = work / f"{model}-{target.replace(':', '_')}"
    if not (dest / "manifest.json").is_file():  # --keep DIR again: the kept captures, analysed anew
        capture(f"{LIBRARY}:{model}", target, dest, opts)
    tgt = load_bundle(dest)
    if not call_members and "call_members" in tgt.ops.columns:
        tgt.ops["call_members"] = ""
    al = analyse(sources[model], tgt).alignment
    calls, stats = al.op_calls, al.stats
    fused = calls.loc[calls["evidence"] == "fused-share"] if calls is not None else None

    fused_frac = float(fused["target_us"].sum()) / max(float(calls["target_us"].sum()), 1e-9) if fused is not None and len(calls) else 0.0
    both = calls[(calls["source_us"] > 0) & (calls["target_us"] > 0)] if calls is not None else None
    paired = {}
    for side in ("source", "target"):
        ops, times = (al.source_ops, al.source_times) if side == "source" else (al.target_ops, al.target_times)
        per_step = times.total / max(1, int(ops.loc[ops["step"] >= 0, "step"].nunique()))
        paired[side] = float(both[f"{side}_us"].sum()) / per_step if both is not None and per_step > 0 else 0.0
    return {"src_paired": paired["source"], "tgt_paired": paired["target"], "src_identity": stats.get("source_op_calls_identity_share", 0.0),
            "tgt_identity": stats.get("target_op_calls_identity_share", 0.0),
            "tgt_fused": fused_frac,
            "rows": int(stats.get("op_calls", 0))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--keep", default="")
    ap.add_argument("--no-call-members", action="store_true")
    a = ap.parse_args()
    work = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="porter-opcalls-"))
    work.mkdir(parents=True, exist_ok=True)
    sources: dict = {}
    print(f"{'model':14} {'target':13} {'src id':>7} {'tgt id':>7} {'fused':>9} {'src pair':>8} {'tgt pair':>8} {'rows':>5}")
    for model in a.models.split(","):
        for target in a.targets.split(","):
            r = shares(model, target, work, sources, not a.no_call_members)
            print(f"{model:14} {target:13} {r['src_identity']:7.3f} {r['tgt_identity']:7.3f} "
                  f"{r['tgt_fused']:9.3f} {r['src_paired']:8.3f} {r['tgt_paired']:8.3f} {r['rows']:5d}", flush=True)


if __name__ == "__main__":
    main()
