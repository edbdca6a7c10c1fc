"""The one stack vocabulary: the stacks a user names (``eager``, ``inductor``, ``xla``,
``ort``), what each owns (its module in ``porter.targets``, the fix catalogue's key per device,
a train step, its ``porter ops`` predictor and runner), and the catalogue keys a recorded
trace's side maps to.

A first step is only useful if it can be done on the target: XLA flags differ between
XLA:CPU, XLA:GPU and XLA:TPU, inductor emits C++ on the CPU and Triton on GPUs, and a vendor
library (cuBLASLt, hipBLASLt, MIOpen) exists on one vendor only; so the catalogue speaks of
``xla-cpu``/``inductor-triton``/``cuda`` where a user says ``xla``/``inductor``/``eager``.
A new stack is one module in ``porter/targets/`` plus one ``StackInfo`` line in ``STACKS``.
The predictor and runner are named as ``module:function`` so this layer imports neither
torch nor ``porter.ops``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

GPU_TYPES = ("cuda", "rocm", "gpu")

CATALOGUE_STACKS: dict[str, str] = {
    "xla-cpu": "XLA:CPU", "xla-gpu": "XLA:GPU", "xla-tpu": "XLA:TPU",
    "cuda": "CUDA (PyTorch)", "rocm": "ROCm (PyTorch)", "mtia": "MTIA (PyTorch)",
    "torch-cpu": "PyTorch eager on the CPU",
    "inductor-cpp": "inductor (C++ on the CPU)", "inductor-triton": "inductor (Triton)",
    "ort": "ONNX Runtime",
    "other": "the target stack",
}
STACK_NAMES = CATALOGUE_STACKS  # the name fixes.toml's `stack` lists are checked against


@dataclass(frozen=True)
class StackInfo:
    """What a stack owns, whether or not its packages are installed here."""

    name: str  # what the user types after DEVICE: (``cpu:inductor``)
    module: str  # the porter.targets module exposing STACK
    catalogue: Mapping[str, str] = field(default_factory=dict)  # device type -> CATALOGUE_STACKS key
    catalogue_default: str = "other"
    train_step: bool = False  # porter bench --mode train offered
    compiles_train_step: bool = False  # the train step runs under torch.compile
    ops_predictor: str | None = None  # "module:function" reading the stack's own registries
    ops_runner: str | None = None  # "module:function" running one op alone on the stack
    ops_exports: bool = False  # porter ops checks each op by exporting it (seconds per op)
    # one intra-op thread, beyond torch's count (which every stack here follows; ORT's session
    # takes it too): environment flags appended while the policy asks for one thread
    # (porter.runtime.threads.applied), read by the stack's runtime when it starts
    one_thread_flags: Mapping[str, str] = field(default_factory=dict)

    def catalogue_key(self, device_type: str) -> str:
        return self.catalogue.get(device_type, self.catalogue_default)


STACKS: dict[str, StackInfo] = {  # the order is the order `porter targets` lists them in
    "eager": StackInfo("eager", "porter.targets.torch_eager",
                       {"cpu": "torch-cpu", "cuda": "cuda", "rocm": "rocm", "mtia": "mtia"},
                       train_step=True),
    "inductor": StackInfo("inductor", "porter.targets.inductor", {"cpu": "inductor-cpp"}, "inductor-triton",
                          train_step=True, compiles_train_step=True,
                          ops_predictor="porter.ops.predict:predict_inductor",
                          ops_runner="porter.ops.confirm:run_inductor"),
    "xla": StackInfo("xla", "porter.targets.xla",
                     {"cpu": "xla-cpu", "tpu": "xla-tpu", **{g: "xla-gpu" for g in GPU_TYPES}},
                     ops_predictor="porter.ops.predict:predict_xla", ops_runner="porter.ops.confirm:run_xla",
                     # XLA:CPU's Eigen pool; its YNN/partitioned-fusion pool needs one CPU while the client
                     # starts as well (porter.runtime.threads.one_cpu_while_xla_starts)
                     one_thread_flags={"XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false"}),
    "ort": StackInfo("ort", "porter.targets.onnxruntime", catalogue_default="ort", ops_exports=True),
}


def ops_stacks() -> tuple[str, ...]:
    """The stacks `porter ops` can check: a registry predictor or an export per op."""
    return tuple(name for name, s in STACKS.items() if s.ops_predictor or s.ops_exports)


def stack_of(manifest: Mapping[str, Any], compiles: bool = False) -> str:
    """A CATALOGUE_STACKS key for one side's bundle manifest: a live capture says its stack
    (target.stack) and device; a recorded trace its profiler (kineto: PyTorch, xplane: XLA)
    and device. compiles: the side's trace runs torch.compile regions
    (porter.analysis.compiled.has_regions), so a recorded PyTorch trace is inductor's, and a
    fix must not tell it to turn torch.compile on."""
    device = manifest.get("device") or {}
    dev = str(device.get("type", "") if isinstance(device, Mapping) else "").lower()
    target = manifest.get("target") or {}
    stack = str(target.get("stack", "") if isinstance(target, Mapping) else "").lower()
    profiler = str(manifest.get("profiler") or "").lower()
    if not stack and "xplane" in profiler:
        stack = "xla"
    elif stack == "onnxruntime" or (stack not in ("xla", "inductor") and "onnxruntime" in profiler):
        stack = "ort"
    elif stack not in ("xla", "inductor", "ort") and compiles and dev in ("cpu", "cuda", "rocm", "mtia"):
        stack = "inductor"
    return STACKS.get(stack, STACKS["eager"]).catalogue_key(dev)


def first_step_for(stack: str, default: str, per_stack: Mapping[str, str]) -> str:
    """The catalogue's step for this stack (else its default), saying which stack it is for."""
    return f"On {CATALOGUE_STACKS.get(stack, CATALOGUE_STACKS['other'])}: {per_stack.get(stack, default)}"
