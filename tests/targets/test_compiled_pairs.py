"""A torch.compile run against an eager run of one real model, as a stranger records them.

Both traces come from plain torch.profiler (no porter tags, no module names, no shapes) of
transformers' GPT-2 (small config, random weights) on the CPU, once eager and once under
torch.compile, written to tmp_path and diagnosed as recorded traces through the CLI. Each
compiled region must form one group with the eager ops of its step (not a region beside
one or two stray eager ops), group ratios must agree with the whole-step ratio, and the
fixes must know which side compiles.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import run_porter

ROOT = Path(__file__).resolve().parents[2]
STEPS = 3

RECORD = textwrap.dedent(f"""
    import sys, torch
    sys.path.insert(0, {str(ROOT)!r})
    from tests.models.library_models import gpt2_small
    from torch.profiler import ProfilerActivity, profile, schedule

    torch.set_num_threads(1)
    model, _ = gpt2_small()
    ids = torch.randint(0, 1000, (8, 64), generator=torch.Generator().manual_seed(0))

    def record(fn, path):
        with torch.no_grad():
            for _ in range(3):
                fn(ids)
            with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active={STEPS}),
                         on_trace_ready=lambda p: p.export_chrome_trace(path)) as p:
                for _ in range({STEPS + 1}):
                    fn(ids)
                    p.step()

    record(model, sys.argv[1])
    record(torch.compile(model), sys.argv[2])
""")


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("compiled_pair")
    eager, compiled = d / "eager.json", d / "compiled.json"
    r = subprocess.run([sys.executable, "-c", RECORD, str(eager), str(compiled)], capture_output=True, text=True,
                       timeout=600)
    if r.returncode != 0 and "InvalidCxxCompiler" in r.stderr:
        pytest.skip("torch.compile needs a C++ compiler on the CPU")
    assert r.returncode == 0, r.stderr[-2000:]
    return eager, compiled


def _diagnose(src: Path, tgt: Path, out: Path) -> dict:
    r = run_porter("diagnose", "--from", str(src), "--to", str(tgt), "-o", str(out))
    assert r.returncode == 0, r.stderr
    return json.loads((out / "diagnosis.json").read_text())


def _region_ops(d: dict, side: str, out: Path) -> set[int]:
    import pandas as pd

    ops = pd.read_parquet(out / side / "ops.parquet")
    return set(ops.loc[ops["name"].str.startswith("Torch-Compiled Region"), "op_id"].tolist())


def _check_grouping(d: dict, out: Path, compiled_side: str) -> None:
    groups = d["groups"]
    comp = [g for g in groups if g["evidence"] == "compiled"]
    # one group per region per profiled step, each holding that step's eager forward
    assert len(comp) == STEPS, [(g["evidence"], g["framework_op"], g["target_framework_op"]) for g in groups]
    assert all(g["compiled"] == compiled_side and g["op_class"] == "compiled" for g in comp)
    eager_n = "n_target" if compiled_side == "source" else "n_source"
    assert min(g[eager_n] for g in comp) >= 100, [g[eager_n] for g in comp]
    name = "framework_op" if compiled_side == "source" else "target_framework_op"
    assert all(g[name].startswith("Torch-Compiled Region") for g in comp)
    regions = _region_ops(d, compiled_side, out)
    assert len(regions) == STEPS
    ids = f"{compiled_side}_op_ids"
    assert all(any(r in g[ids] for g in comp) for r in regions)  # the region op sits in its group
    # the regions' groups hold nearly all the time, and no group is a region beside stray ops
    for side in ("source", "target"):
        assert sum(g[f"{side}_us"] for g in comp) >= 0.95 * sum(g[f"{side}_us"] for g in groups)
    # each step's group holds that whole step's eager forward: the same eager op count in every
    # step (timing-free, so load on a shared runner cannot move it)
    assert len({g[eager_n] for g in comp}) == 1, [g[eager_n] for g in comp]
    total = sum(g["source_us"] + g["target_us"] for g in groups)
    heavy = [g for g in groups if g["source_us"] + g["target_us"] > 0.01 * total]
    # was 238-3307x (a region against a few stray ops); ~2x quiet, wider when load stalls a step
    assert max(max(g["ratio"], 1 / g["ratio"]) for g in heavy) < 10
    cov = d["alignment"]["coverage"]
    assert cov["source"] >= 0.99 and cov["target"] >= 0.99, cov


@pytest.mark.slow
def test_eager_source_against_compiled_target(traces, tmp_path):
    eager, compiled = traces
    d = _diagnose(eager, compiled, tmp_path / "d")
    _check_grouping(d, tmp_path / "d", "target")
    for f in d["fixes"]:  # the target already compiles: no fix may tell it to turn torch.compile on
        assert f["first_step"].startswith("On inductor (C++ on the CPU): "), f["first_step"]
        assert "torch.compile(model" not in f["first_step"] and "under torch.compile" not in f["first_step"]
        assert f["fix_id"] != "compile-like-source"


@pytest.mark.slow
def test_compiled_source_against_eager_target(traces, tmp_path):
    eager, compiled = traces
    d = _diagnose(compiled, eager, tmp_path / "d")
    _check_grouping(d, tmp_path / "d", "source")
    fixes = [f for f in d["fixes"] if f["kind"] == "perf"]
    # compiled GPT-2 runs ~2x the eager one on a quiet machine, but the two recordings are
    # sequential and load on a shared runner can close the gap; below the fix's min_ratio
    # (1.2) no fix may claim the eager side should compile
    if max(g["ratio"] for g in d["groups"] if g["evidence"] == "compiled") < 1.2:
        assert all(f["fix_id"] != "compile-like-source" for f in fixes), [f["fix_id"] for f in fixes]
        return
    assert fixes and fixes[0]["fix_id"] == "compile-like-source", [f["fix_id"] for f in fixes]
    top = fixes[0]
    assert top["first_step"].startswith("On PyTorch eager on the CPU: ") and "torch.compile(model)" in top["first_step"]
    assert top["op_classes"] == ["compiled"] and len(top["group_ids"]) >= 1
    assert top["ops"][0].startswith("Torch-Compiled Region")  # named by the region, not an eager op in it
    # no shapes recorded: the cost is unknown, so the source's time is the evidence, said plainly
    assert 0 < top["recoverable_us"] <= sum(g["target_us"] - g["source_us"] for g in d["groups"]
                                            if g["evidence"] == "compiled" and g["target_us"] > g["source_us"]) + 1e-6
    assert any("counts instead" in e for e in top["evidence"]), top["evidence"]


@pytest.mark.corpus
def test_corpus_compiled_trace_is_one_region():
    """mi300x_torch_compile_triton: a cache lookup, one region, the graph call, and Triton
    kernels and extern mm/attention calls beneath it; all its device time lies in that region."""
    from conftest import corpus_dir

    from porter.analysis.compiled import has_regions, region_roots
    from profilers import kineto

    path = corpus_dir() / "kineto" / "mi300x_torch_compile_triton.json.gz"
    if not path.is_file():
        pytest.skip(f"trace corpus not found at {corpus_dir()}")
    ops = kineto.read(path).ops
    assert has_regions(ops)
    roots = region_roots(ops)
    region = ops.loc[ops["name"].str.startswith("Torch-Compiled Region"), "op_id"].tolist()
    assert len(region) == 1
    timed = ops.loc[ops["device_us"] > 0, "op_id"]
    assert len(timed) > 10 and (roots.reindex(timed).to_numpy() == region[0]).all()
    lookup = ops.loc[ops["name"] == "TorchDynamo Cache Lookup", "op_id"]
    assert (roots.reindex(lookup).to_numpy() == region[0]).all()
