"""Live capture on this machine's CPU: eager and inductor, real runs through the CLI."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from porter.capture.run import CaptureOptions, capture
from porter.core.errors import TargetUnavailable
from porter.capture.models import load_model
from porter.targets import CaptureFailure
from porter.targets import get_stack, parse_target
from tests.conftest import run_porter

BAD = Path(__file__).parents[1] / "models" / "bad_models.py"
FAST = ("--steps", "2", "--warmup", "1", "--repeats", "5")
OPTS = CaptureOptions(steps=2, warmup=1, repeats=5)


def called_module_paths(name: str) -> set[str]:
    """Module paths whose forward runs, found independently with plain forward hooks."""
    spec = load_model(name)
    called: set[str] = set()
    handles = [m.register_forward_hook(lambda *_a, _n=n: called.add(_n.replace(".", "/")))
               for n, m in spec.module.named_modules() if n]
    with torch.no_grad():
        spec.module(*spec.example_inputs)
    for h in handles:
        h.remove()
    return called


@pytest.fixture(scope="module")
def eager_bundle(tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("cap") / "tf_eager"
    r = run_porter("capture", "transformer", "--on", "cpu", "-o", str(dest), *FAST)
    assert r.returncode == 0, r.stderr
    assert "step time: median" in r.stdout and "(process CPU time; IQR/median" in r.stdout
    # the one measurement policy, as diagnose and bench use it, shown once and recorded
    assert r.stdout.count("measured: one intra-op thread per stack; freed memory kept") == 1
    assert manifest(dest)["measurement"]["threads"]["single"] is True
    return dest


@pytest.fixture(scope="module")
def inductor_bundle(tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("cap") / "tf_inductor"
    r = run_porter("capture", "transformer", "--on", "cpu:inductor", "-o", str(dest), *FAST)
    assert r.returncode == 0, r.stderr
    return dest


def manifest(path: Path) -> dict:
    return json.loads((path / "manifest.json").read_text())


@pytest.mark.slow
def test_eager_bundle_contents(eager_bundle):
    m = manifest(eager_bundle)
    assert m["status"] == "ok" and m["target"]["text"] == "cpu:eager"
    assert m["model"]["fingerprint"] == load_model("transformer").fingerprint
    t = m["timing"]
    assert len(t["samples_s"]) == 5 and t["median_s"] == pytest.approx(statistics.median(t["samples_s"]))
    assert t["iqr_s"] >= 0 and "spread" in t
    assert m["profiler_overhead"] > 0
    assert m["ceilings"]["matmul_flops_per_s"] > 1e8 and m["ceilings"]["copy_bytes_per_s"] > 1e8
    assert m["device"]["name"] and m["numerics"] == {**m["numerics"], "nan": False, "inf": False}
    raw = eager_bundle / m["raw"]["path"]
    events = json.loads(raw.read_text())["traceEvents"]
    steps = {e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#")}
    assert len(steps) == 2  # --steps 2 recorded steps


@pytest.mark.slow
def test_eager_module_paths_cover_model(eager_bundle):
    ops = pd.read_parquet(eager_bundle / "ops.parquet")
    found = set(ops["module"]) - {""}
    called = called_module_paths("transformer")
    # every module that does work has ops under its own path (containers like blocks/0 do the residual adds)
    assert called - found <= {"blocks/0/mlp", "blocks/1/mlp"}, called - found
    assert found <= called
    # Outside every module: only the root forward's own ops (position ids, the embedding sum),
    # the same few per step. Counted by op, not by time, so a loaded machine cannot fail it.
    outside = ops[ops["module"] == ""]
    assert set(outside["name"]) <= {"aten::arange", "aten::empty", "aten::resize_", "aten::add"}, set(outside["name"])
    per_step = outside.groupby("step").size()
    assert per_step.max() <= 5 and per_step.nunique() == 1, per_step.to_dict()


@pytest.mark.slow
def test_eager_activations_keys_are_module_paths(eager_bundle):
    """Every called module is sketched under its path (samples at the fixed-seed positions of
    its element count); the model output and input are kept in full."""
    import json

    from safetensors.numpy import load_file as load_np

    from porter.targets.sketch import positions

    summaries = json.loads((eager_bundle / "activations" / "sketch.json").read_text())
    samples = load_np(str(eager_bundle / "activations" / "sketch.safetensors"))
    outs = load_file(str(eager_bundle / "activations" / "outputs.safetensors"))
    called = called_module_paths("transformer")
    assert called <= set(summaries) and set(summaries) == set(samples)
    spec = load_model("transformer")
    with torch.no_grad():
        ref = spec.module.ln_f(spec.module.blocks[1](spec.module.blocks[0](
            spec.module.tok(spec.example_inputs[0]) + spec.module.pos(torch.arange(64)))))
    flat = ref.reshape(-1).double().numpy()
    assert summaries["ln_f"]["numel"] == flat.size and summaries["ln_f"]["nan"] == 0
    assert abs(summaries["ln_f"]["l2"] - float((flat ** 2).sum() ** 0.5)) < 1e-4 * summaries["ln_f"]["l2"]
    torch.testing.assert_close(torch.from_numpy(samples["ln_f"]), torch.from_numpy(flat[positions(flat.size)]))
    torch.testing.assert_close(outs["<output>"], spec.module.head(ref))


@pytest.mark.slow
def test_inductor_one_region_and_module_share(inductor_bundle):
    m = manifest(inductor_bundle)
    assert m["status"] == "ok" and m["target"]["module_attribution"] == "compiler"
    assert m["stack_info"]["compiled_regions"] == 1
    assert m["stack_info"]["graph_breaks"] == 0
    ops = pd.read_parquet(inductor_bundle / "ops.parquet")
    found = set(ops["module"]) - {""}
    # a fused kernel spanning two blocks lands on their container ('blocks', a ModuleList
    # with no forward of its own), so compare with every module path, not only called ones
    named = {n.replace(".", "/") for n, _ in load_model("transformer").module.named_modules() if n}
    assert found and called_module_paths("transformer") & found and found <= named, found - named
    mm = ops[ops["name"].isin(["aten::addmm", "aten::mm", "aten::bmm"]) & (ops["step"] >= 0)]
    assert (mm["module"] != "").all()
    # Inductor's fused kernels (graph_*) carry module paths; counted, not timed, so a loaded
    # CPU cannot tip it (13 of 15 per step measured: the two at the root, embedding + first
    # norm and the final norm, span no single module)
    fused = ops[ops["name"].str.startswith("graph_") & (ops["step"] >= 0)]
    assert len(fused) and (fused["module"] != "").mean() >= 0.75, fused[fused["module"] == ""]["name"].tolist()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_inductor_builtins_compile_to_one_region(name):
    stack = get_stack("inductor")
    spec = load_model(name)
    prepared = stack.prepare(spec, "cpu")
    out = stack.first_run(prepared)
    assert prepared.info["compiled_regions"] == 1 and prepared.info["graph_breaks"] == 0
    with torch.no_grad():
        torch.testing.assert_close(out, spec.module(*spec.example_inputs), rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_unsupported_op_under_inductor_is_named(tmp_path):
    dest = tmp_path / "failed"
    r = run_porter("capture", f"{BAD}:custom_op_model", "--on", "cpu:inductor", "-o", str(dest), *FAST)
    assert r.returncode == 2
    line = r.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert "porter_test" in line and "host_only" in line  # the op
    assert "module body" in line  # the module whose forward called it
    m = manifest(dest)
    assert m["status"] == "failed" and m["error"]["module"] == "body"
    assert "fake" in m["error"]["detail"]


def test_failing_module_in_eager_is_named(tmp_path):
    dest = tmp_path / "failed"
    with pytest.raises(CaptureFailure) as exc:
        capture(f"{BAD}:shape_bug_model", "cpu", dest, OPTS)
    assert "module body/fc2" in str(exc.value) and "op aten::addmm " in str(exc.value)
    assert exc.value.module == "body/fc2"
    assert manifest(dest)["status"] == "failed" and manifest(dest)["error"]["module"] == "body/fc2"


def test_nan_output_is_flagged_not_fatal(tmp_path):
    result = capture(f"{BAD}:nan_model", "cpu", tmp_path / "nan", OPTS)
    nums = manifest(result.path)["numerics"]
    assert nums["nan"] is True and nums["ok"] is False and nums["nan_count"] > 0


def test_cuda_unavailable_one_line_exit_3(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    r = run_porter("capture", "transformer", "--on", "cuda", "-o", str(tmp_path / "x"))
    assert r.returncode == 3
    assert "no CUDA device" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()


def test_tpu_unavailable_names_what_is_missing(tmp_path):
    with pytest.raises(TargetUnavailable) as exc:
        capture("transformer", "tpu", tmp_path / "x", OPTS)
    assert exc.value.exit_code == 3 and "tpu" in str(exc.value) and "\n" not in str(exc.value)
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("text,device,stack", [
    ("cpu", "cpu", "eager"), ("cuda:inductor", "cuda", "inductor"), ("tpu", "tpu", "xla"),
    ("xla", "auto", "xla"), ("cpu:ort", "cpu", "ort"), ("ROCM", "rocm", "eager"),
])
def test_parse_target(text, device, stack):
    spec = parse_target(text)
    assert (spec.device, spec.stack) == (device, stack)


@pytest.mark.parametrize("text,needle", [("gpu", "unknown target"), ("gpu:eager", "unknown device"), ("cpu:tensorrt", "unknown stack")])
def test_parse_target_errors(text, needle):
    from porter.core.errors import PorterError

    with pytest.raises(PorterError, match=needle):
        parse_target(text)


