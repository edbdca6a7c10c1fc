"""Which execution stack a side ran on, in the terms the fix catalogue speaks.

A first step is only useful if it can be done on the target: XLA flags differ between
XLA:CPU, XLA:GPU and XLA:TPU, inductor emits C++ on the CPU and Triton on GPUs, and a
vendor library (cuBLASLt, hipBLASLt, MIOpen) exists on one vendor only. The stack comes
from a live capture's manifest (target.stack and the device type); a recorded trace says
its profiler (kineto: PyTorch, xplane: XLA) and its device.
"""

from __future__ import annotations

from typing import Any, Mapping

STACK_NAMES: dict[str, str] = {
    "xla-cpu": "XLA:CPU", "xla-gpu": "XLA:GPU", "xla-tpu": "XLA:TPU",
    "cuda": "CUDA (PyTorch)", "rocm": "ROCm (PyTorch)", "mtia": "MTIA (PyTorch)",
    "torch-cpu": "PyTorch eager on the CPU",
    "inductor-cpp": "inductor (C++ on the CPU)", "inductor-triton": "inductor (Triton)",
    "ort": "ONNX Runtime",
    "other": "the target stack",
}
GPU_TYPES = ("cuda", "rocm", "gpu")


def stack_of(manifest: Mapping[str, Any], compiles: bool = False) -> str:
    """A key of STACK_NAMES for one side's bundle manifest. compiles: the side's trace runs
    torch.compile regions (porter.analysis.compiled.has_regions), so a recorded PyTorch trace
    is inductor's, and a fix must not tell it to turn torch.compile on."""
    device = manifest.get("device") or {}
    dev = str(device.get("type", "") if isinstance(device, Mapping) else "").lower()
    target = manifest.get("target") or {}
    stack = str(target.get("stack", "") if isinstance(target, Mapping) else "").lower()
    profiler = str(manifest.get("profiler") or "").lower()
    if stack == "xla" or (not stack and "xplane" in profiler):
        return {"cpu": "xla-cpu", "tpu": "xla-tpu"}.get(dev, "xla-gpu" if dev in GPU_TYPES else "other")
    if stack == "inductor":
        return "inductor-cpp" if dev == "cpu" else "inductor-triton"
    if stack in ("ort", "onnxruntime") or "onnxruntime" in profiler:
        return "ort"
    if compiles and dev in ("cpu", "cuda", "rocm", "mtia"):
        return "inductor-cpp" if dev == "cpu" else "inductor-triton"
    if dev in ("cuda", "rocm", "mtia"):
        return dev
    if dev == "cpu":
        return "torch-cpu"
    return "other"


def first_step_for(stack: str, default: str, per_stack: Mapping[str, str]) -> str:
    """The catalogue's step for this stack (else its default), saying which stack it is for."""
    return f"On {STACK_NAMES.get(stack, STACK_NAMES['other'])}: {per_stack.get(stack, default)}"
