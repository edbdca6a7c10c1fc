"""A module kind's gap inside the model: every instance compiled in place (a script, not a test).

Two timings of the same module "alone" disagreed beyond both intervals, because the company a
module is timed in decides a few-per-cent GEMM gap (BENCHMARKS.md, issue 24, "Three times the
repeats"): bert_base's intermediate dense read +135 us beside porter's 54 suspects, +198 with
two other modules and +338 beside ~200 leaves. This asks the model itself. The eager model is
timed against the same model with every instance of one kind (e.g. all twelve
`intermediate/dense`) replaced by its torch.compile (inductor) module, interleaved, each timed
forward after three untimed ones (porter's SETTLE_CALLS), process CPU time, one thread. The
forward's difference, less the compiled call's floor over the eager one's (porter's _Floor with
each call's arguments), divided by the instances, is that kind's gap per instance in the model's
own cache and allocator state. One instance alone would be below the forward's noise; twelve
are not.

    .venv/bin/python -m benchmarks.module_swap --model bert_base --kinds intermediate/dense,output/dense
"""

from __future__ import annotations

import argparse
import copy
import statistics
from pathlib import Path
from typing import Any, Callable

import torch

from benchmarks.live_modules import LIBRARY, samples_us
from porter.capture.confirm import _Floor, recorded_calls
from porter.core.samples import median_ci


def instances(model: torch.nn.Module, kind: str) -> list[str]:
    """Porter paths of the modules whose path ends with kind (the last segments, '/'-separated)."""
    want = kind.strip("/").split("/")
    return [n.replace(".", "/") for n, _ in model.named_modules()
            if n and n.replace(".", "/").split("/")[-len(want):] == want]


def swapped(model: torch.nn.Module, paths: list[str]) -> torch.nn.Module:
    """A copy of model with each path's module replaced by its inductor-compiled module."""
    out = copy.deepcopy(model)
    for path in paths:
        parent_path, _, name = path.rpartition("/")
        parent = out.get_submodule(parent_path.replace("/", ".")) if parent_path else out
        setattr(parent, name, torch.compile(getattr(parent, name), backend="inductor"))
    return out


def kind_gap(model: torch.nn.Module, inputs: tuple[Any, ...], kind: str, repeats: int) -> dict[str, Any]:
    import torch._dynamo.config as dynamo_config

    paths = instances(model, kind)
    calls = recorded_calls(model, inputs, paths)
    with dynamo_config.patch(recompile_limit=1024, accumulated_recompile_limit=8192, automatic_dynamic_shapes=False):
        compiled = swapped(model, paths)
        floor_eager, floor_compiled = _Floor(), torch.compile(_Floor(), backend="inductor")

        def forward(m: torch.nn.Module) -> Callable[[], Any]:
            def run() -> Any:
                with torch.no_grad():
                    return m(*inputs)
            return run

        def floors(f: torch.nn.Module) -> Callable[[], Any]:
            def run() -> Any:
                with torch.no_grad():
                    for c in calls.values():
                        for a, kw in c:
                            f(*a, **kw)
            return run

        t = samples_us({"eager": forward(model), "swapped": forward(compiled),
                        "floor_eager": floors(floor_eager), "floor_compiled": floors(floor_compiled)}, repeats)
    n = len(paths)
    per = [((s - e) - (fc - fe)) / n for e, s, fe, fc in
           zip(t["eager"], t["swapped"], t["floor_eager"], t["floor_compiled"])]
    lo, hi = median_ci(per)
    return {"kind": kind, "instances": n, "forward_us": statistics.median(t["eager"]),
            "gap_us": statistics.median(per), "low_us": lo, "high_us": hi}


def main() -> None:
    from porter.capture.models import load_model
    from porter.runtime.threads import applied, current

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="bert_base", help="a library model (tests/models/library_models.py) or FILE:FACTORY")
    ap.add_argument("--kinds", default="intermediate/dense,output/dense,attention/self/key")
    ap.add_argument("--repeats", type=int, default=40)
    a = ap.parse_args()
    torch.set_num_threads(1)
    ref = a.model if ":" in a.model else f"{LIBRARY}:{a.model}"
    spec = load_model(ref)
    with applied(current()):
        for kind in a.kinds.split(","):
            r = kind_gap(spec.module, spec.example_inputs, kind, a.repeats)
            print(f"{Path(ref).name} {r['kind']}: {r['instances']} instances compiled in place, forward "
                  f"{r['forward_us'] / 1e3:.1f} ms eager; gap per instance {r['gap_us']:+.1f} us "
                  f"[{r['low_us']:+.1f}, {r['high_us']:+.1f}] (median over {a.repeats} repeats, 95%)", flush=True)


if __name__ == "__main__":
    main()
