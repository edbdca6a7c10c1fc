"""The planning numbers of issue #10, per corpus pair (and live demo diagnoses): the headline
with its interval, the share of device time with known cost, and the top 3 fixes.

    PORTER_TRACE_CORPUS=../shared/traces python benchmarks/planning_numbers.py [DEMO_DIR ...] > note.md
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

PAIRS = {
    "bert-small H100 -> MI300X": ("h100_gaunernst_bert-small-uncased", "mi300x_gaunernst_bert-small-uncased"),
    "Falconsai ViT H100 -> MI300X": ("h100_Falconsai_nsfw_image_detection", "mi300x_Falconsai_nsfw_image_detection"),
    "Qwen1.5-0.5B H100 -> MI300X": ("h100_Qwen_Qwen1.5-0.5B-Chat", "mi300x_Qwen_Qwen1.5-0.5B-Chat"),
    "Falconsai ViT MI300X -> H100 (owlv2-like: target faster)": ("mi300x_Falconsai_nsfw_image_detection",
                                                                "h100_Falconsai_nsfw_image_detection"),
}


def _x(v: float | None) -> str:
    return "n/a" if v is None else f"x{v:.3f}"


def row(title: str, j: dict) -> list[str]:
    h = j["headline"]
    lo, hi = h["ci95"]
    ci = f"[{_x(lo)}, {_x(hi)}]" if lo is not None else "no interval"
    share = j["roofline"]["totals"]["known_cost_share"]
    busy = j.get("busy") or {}
    lines = [f"### {title}", "",
             f"- headline: {_x(h['ratio'])} {ci}, n={h['n']} ({h['basis']})"
             + (f"; steps: source {h['steps']['source']['n']}, target {h['steps']['target']['n']}" if "steps" in h else ""),
             f"- known-cost share: source {share['source']:.2%}, target {share['target']:.2%}; "
             f"recoverable {j['roofline']['totals']['recoverable_us']:.1f} us "
             f"(unknown-cost target time {j['roofline']['totals']['unknown_cost_target_us']:.1f} us left out)",
             f"- busy vs kernel sum: overlap source {busy.get('source', {}).get('overlap_share') or 0:.2%}, "
             f"target {busy.get('target', {}).get('overlap_share') or 0:.2%}",
             "- top 3 fixes:"]
    for f in (j["fixes"] or [])[:3]:
        lines.append(f"  {f['rank']}. [{f.get('opportunity', '')}] {f['title']}: up to {f['recoverable_us']:.1f} us, "
                     f"{f['confidence']} confidence, on {', '.join(f['op_classes'][:3])}; {f['first_step'][:110]}...")
    return lines + [""]


def main(demo_dirs: list[str]) -> None:
    from porter.pipeline.diagnose import diagnose

    from porter.bundles.ingest import open_any

    corpus = Path(os.environ.get("PORTER_TRACE_CORPUS", REPO.parent / "shared" / "traces")) / "kineto"
    out = ["## Per corpus pair", ""]
    with tempfile.TemporaryDirectory() as tmp:
        for title, (src, tgt) in PAIRS.items():
            _, dest = diagnose(open_any(corpus / f"{src}.json.gz"), open_any(corpus / f"{tgt}.json.gz"),
                               Path(tmp) / src, report=False)
            out += row(title, json.loads(dest.read_text()))
    if demo_dirs:
        out += ["## Live demo (`porter diagnose transformer --from cpu --to xla`)", ""]
        for d in demo_dirs:
            out += row(f"demo run {Path(d).name}", json.loads((Path(d) / "diagnosis.json").read_text()))
    print("\n".join(out))


if __name__ == "__main__":
    main(sys.argv[1:])
