"""Fixes fit the target: every first step names the target's stack, and no step asks a
stack for what it does not have (XLA:CPU told about GPU flags, CUTLASS or Pallas TPU)."""

from __future__ import annotations

import json

import pytest

from conftest import corpus_dir
from porter.analysis.fixes import load_catalogue
from porter.core.stacks import STACK_NAMES, STACKS, first_step_for, stack_of

DEVICE_OF = {"xla-cpu": "cpu", "xla-gpu": "cuda", "xla-tpu": "tpu", "cuda": "cuda", "rocm": "rocm", "mtia": "mtia",
             "torch-cpu": "cpu", "inductor-cpp": "cpu", "inductor-triton": "cuda", "ort": "cpu"}
# Words that only make sense on other stacks.
FOREIGN = {
    "xla-cpu": ("xla_gpu", "CUTLASS", "Composable Kernel", "Pallas TPU", "cuBLAS", "MIOpen", "hipBLASLt", "torch.compile"),
    "torch-cpu": ("xla_gpu", "CUTLASS", "Composable Kernel", "Pallas", "MIOpen", "hipBLASLt", "cuDNN"),
    "inductor-cpp": ("xla_gpu", "CUTLASS", "Composable Kernel", "Pallas", "MIOpen", "hipBLASLt"),
    "cuda": ("xla_gpu", "Composable Kernel", "MIOpen", "hipBLASLt", "AOTriton", "Pallas TPU"),
    "rocm": ("xla_gpu", "CUTLASS", "cuBLASLt", "Pallas TPU"),
    "ort": ("xla_gpu", "CUTLASS", "Composable Kernel", "Pallas", "torch.compile"),
}


@pytest.mark.parametrize("manifest,stack", [
    ({"target": {"stack": "xla"}, "device": {"type": "cpu"}}, "xla-cpu"),
    ({"target": {"stack": "xla"}, "device": {"type": "tpu"}}, "xla-tpu"),
    ({"target": {"stack": "inductor"}, "device": {"type": "cuda"}}, "inductor-triton"),
    ({"target": {"stack": "inductor"}, "device": {"type": "cpu"}}, "inductor-cpp"),
    ({"target": {"stack": "ort"}, "device": {"type": "cpu"}}, "ort"),
    ({"target": {"stack": "eager"}, "device": {"type": "cpu"}}, "torch-cpu"),
    ({"profiler": "kineto", "device": {"type": "rocm"}}, "rocm"),  # a recorded PyTorch trace
    ({"profiler": "xplane", "device": {"type": "rocm"}}, "xla-gpu"),
])
def test_stack_from_manifest(manifest, stack):
    assert stack_of(manifest) == stack


@pytest.mark.parametrize("device,stack", [("cpu", "inductor-cpp"), ("cuda", "inductor-triton"), ("rocm", "inductor-triton")])
def test_recorded_trace_with_compiled_regions_is_inductor(device, stack):
    """A recorded PyTorch trace that runs torch.compile regions is inductor's: its first steps
    must not tell it to turn torch.compile on."""
    m = {"profiler": "kineto", "device": {"type": device}}
    assert stack_of(m, compiles=True) == stack
    assert stack_of(m) == {"cpu": "torch-cpu"}.get(device, device)
    assert stack_of({"profiler": "xplane", "device": {"type": "tpu"}}, compiles=True) == "xla-tpu"


@pytest.mark.parametrize("stack", sorted(FOREIGN))
def test_first_steps_name_the_stack_and_nothing_foreign(stack):
    cat = load_catalogue()
    for entry in cat.fixes:
        device_rule = entry.applies_when.get("device_type")
        if device_rule and DEVICE_OF[stack] not in device_rule:
            continue  # the entry never applies to this stack's device
        if stack not in entry.applies_when.get("stack", [stack]):
            continue
        step = first_step_for(stack, entry.first_step, entry.first_steps)
        assert step.startswith(f"On {STACK_NAMES[stack]}: "), step
        for word in FOREIGN[stack]:
            assert word not in step, (entry.id, stack, word)


@pytest.mark.corpus
@pytest.mark.parametrize("pair", ["gaunernst_bert-small-uncased", "Falconsai_nsfw_image_detection"])
def test_corpus_fixes_first_step_names_the_target_stack(pair, tmp_path):
    from porter.pipeline.diagnose import diagnose

    from porter.bundles.ingest import open_any

    k = corpus_dir() / "kineto"
    if not k.is_dir():
        pytest.skip(f"trace corpus not found at {corpus_dir()}")
    _, dest = diagnose(open_any(k / f"h100_{pair}.json.gz"), open_any(k / f"mi300x_{pair}.json.gz"), tmp_path, report=False)
    fixes = json.loads(dest.read_text())["fixes"]
    assert fixes
    for f in fixes:
        assert f["first_step"].startswith("On ROCm (PyTorch): "), f["first_step"]
        assert "CUTLASS" not in f["first_step"] and "cuBLASLt" not in f["first_step"]


def test_an_op_that_became_a_sort_gets_the_sort_fix_not_fusion():
    """A median lowered to a sort on XLA:CPU, with fewer kernels than the source: the sort fix,
    with the XLA step; 'turn on fusion' needs more kernels on the target and stays out."""
    import pandas as pd

    from porter.analysis.fixrank import rank_fixes

    groups = pd.DataFrame([dict(
        group_id="m", module="head/stats", op_class="reduction", framework_op="sort", source_framework_op="aten::median",
        source_us=10.0, target_us=40.0, source_kernels=3, target_kernels=1, flops=1e5, bytes=4e5, dtype="fp32",
        roofline_us=0.5, recoverable_us=30.0, demonstrated_us=30.0, target_device_type="cpu", source_device_type="cpu",
        target_stack="xla-cpu")])
    fixes = {f.fix_id: f for f in rank_fixes(groups)}
    assert "compiler-fusion" not in fixes
    sort_fix = fixes["avoid-sort-lowering"]
    assert sort_fix.first_step.startswith("On XLA:CPU: ") and "top_k" in sort_fix.first_step
    assert "the target runs a sort" in sort_fix.why


def test_one_registry_names_every_stack_and_what_it_owns():
    """The targets, `porter ops`, the benchmark's train step and the fix catalogue all read the
    one registry (porter.core.stacks.STACKS): a stack registered there is one a user can name."""
    from porter.ops.build import predictor, runner
    from porter.targets import STACK_MODULES, get_stack

    assert list(STACK_MODULES) == list(STACKS) == ["eager", "inductor", "xla", "ort"]
    for name, info in STACKS.items():
        assert get_stack(name).name == name  # the module it names exposes that stack
        for device in ("cpu", "cuda", "rocm", "tpu"):
            assert info.catalogue_key(device) in STACK_NAMES
        if info.ops_predictor:
            assert callable(predictor(name)) and callable(runner(name))
    assert [n for n, s in STACKS.items() if s.train_step] == ["eager", "inductor"]
    assert stack_of({"target": {"stack": "xla"}, "device": {"type": "cuda"}}) == "xla-gpu"
