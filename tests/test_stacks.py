"""Fixes fit the target: every first step names the target's stack, and no step asks a
stack for what it does not have (XLA:CPU told about GPU flags, CUTLASS or Pallas TPU)."""

from __future__ import annotations

import json

import pytest

from conftest import corpus_dir
from porter.analysis.fixes import load_catalogue
from porter.analysis.stacks import STACK_NAMES, first_step_for, stack_of

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
    from porter.diagnose import diagnose

    from porter.ingest import open_any

    k = corpus_dir() / "kineto"
    if not k.is_dir():
        pytest.skip(f"trace corpus not found at {corpus_dir()}")
    _, dest = diagnose(open_any(k / f"h100_{pair}.json.gz"), open_any(k / f"mi300x_{pair}.json.gz"), tmp_path, report=False)
    fixes = json.loads(dest.read_text())["fixes"]
    assert fixes
    for f in fixes:
        assert f["first_step"].startswith("On ROCm (PyTorch): "), f["first_step"]
        assert "CUTLASS" not in f["first_step"] and "cuBLASLt" not in f["first_step"]
