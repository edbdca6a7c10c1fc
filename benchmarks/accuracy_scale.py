"""Cost of per-module accuracy at model scale: a live diagnose with and without it.

Each run is its own process, which reports its own peak RSS (ru_maxrss), without then with
accuracy per model, so a busy machine slows both alike. Per run: wall seconds, peak RSS (ru_maxrss of the child),
modules compared, modules without a comparison, and the op named per introducing module.

    python benchmarks/accuracy_scale.py tests/models/hf.py:bert_base tests/models/hf.py:gpt2_base --to xla
    python benchmarks/accuracy_scale.py tests/models/hf.py:bert_base --to xla --dtype bf16   # a precision port
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = """
import json, resource, sys
from porter.capture.options import CaptureOptions
from porter.pipeline.diagnose import diagnose_specs
model, target, out, acc, dtype = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1", sys.argv[5]
diagnose_specs("cpu", target, out, model=model, report=False, target_dtype=dtype,
               capture_options=CaptureOptions(steps=1, warmup=1, repeats=3, activations=acc))
print(json.dumps({"peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run(model: str, target: str, accuracy: bool, dtype: str = "") -> dict:
    out = Path(tempfile.mkdtemp(prefix="porter-accscale-"))
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CHILD, model, target, str(out), "1" if accuracy else "0", dtype],
                          capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode:
        return {"model": model, "accuracy": accuracy, "error": proc.stderr.strip().splitlines()[-1:]}
    d = json.loads((out / "diagnosis.json").read_text())
    acc = d.get("accuracy") or {}
    return {"model": model, "accuracy": accuracy, "wall_s": round(wall, 1), "peak_rss_mb": round(json.loads(proc.stdout.strip().splitlines()[-1])["peak_rss_mb"]),
            "seconds": {k: round(v, 1) for k, v in d["seconds"].items()},
            "modules_compared": acc.get("modules_compared"), "local_ran": (acc.get("local") or {}).get("ran"),
            "not_compared": len(acc.get("not_compared") or {}), "local_not_run": len((acc.get("local") or {}).get("not_run") or {}),
            "ops": {m: o.get("op") for m, o in (acc.get("ops") or {}).items()},
            "precision": {k: (acc.get("precision") or {}).get(k) for k in ("dtype", "judged_modules", "beyond_dtype", "no_verdict")}
            if acc.get("precision") else None}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+")
    ap.add_argument("--to", default="xla")
    ap.add_argument("--dtype", default="", help="a precision port: the target runs this dtype")
    a = ap.parse_args()
    for model in a.models:
        for accuracy in (False, True):
            print(json.dumps(run(model, a.to, accuracy, a.dtype)), flush=True)


if __name__ == "__main__":
    main()
