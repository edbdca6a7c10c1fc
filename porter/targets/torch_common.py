"""Parts shared by the torch stacks (eager, inductor): devices, sync, Kineto profiling,
hook-based activations. Each torch stack file adds only how it builds the callable and
how module paths get into the trace."""

from __future__ import annotations

import abc
import contextlib
from pathlib import Path
from typing import Any, ContextManager

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.profiler import ProfilerActivity, profile, schedule

from porter.targets.ceilings import torch_device, torch_sync
from porter.targets.base import (Activations, Availability, ModuleTracker, Prepared, Stack, first_float_tensor, module_hooks,
                                 module_path, tensor_leaves)
from porter.targets.sketch import call_key, torch_sketch

CUDA_REMEDY = "capture on {what} host with `porter capture MODEL --on {device} -o DIR` and pass the bundle with --from/--to"


def torch_availability(device: str) -> Availability:
    if device == "cpu":
        return Availability(True)
    if device in ("cuda", "rocm"):
        what = "CUDA" if device == "cuda" else "ROCm"
        remedy = CUDA_REMEDY.format(what=f"a {what}", device=device)
        if not torch.cuda.is_available():
            return Availability(False, f"no {what} device visible to torch (torch.cuda.is_available() is False)", remedy)
        is_hip = bool(torch.version.hip)
        if (device == "rocm") != is_hip:
            build = f"HIP {torch.version.hip}" if is_hip else f"CUDA {torch.version.cuda}"
            return Availability(False, f"this torch is a {build} build, not {what}", remedy)
        return Availability(True)
    if device == "mps":
        if torch.backends.mps.is_available():
            return Availability(True)
        return Availability(False, "no Apple MPS device visible to torch", CUDA_REMEDY.format(what="an Apple silicon", device="mps"))
    return Availability(False, f"torch stacks do not run on {device}", "use --on tpu (the xla stack) for TPUs")


def place(value: Any, dev: torch.device) -> Any:
    return torch.utils._pytree.tree_map(lambda t: t.to(dev) if isinstance(t, torch.Tensor) else t, value)


def to_cpu_copy(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to("cpu").contiguous().clone()


class TorchStack(Stack):
    """Shared torch behaviour; subclasses implement make_call() and tagging()."""

    devices = ("cpu", "cuda", "rocm", "mps")
    trace_format = "kineto"

    def availability_impl(self, device: str) -> Availability:
        return torch_availability(device)

    def prepare_impl(self, model: Any, device: str) -> Prepared:
        dev = torch_device(device)
        module = model.module.to(dev).eval()
        inputs = tuple(place(x, dev) for x in model.example_inputs)
        prepared = Prepared(self.name, device, model, call=lambda *a: a, inputs=inputs, handle=module)
        prepared.call = self.make_call(prepared)
        return prepared

    @abc.abstractmethod
    def make_call(self, prepared: Prepared):
        """The callable one forward runs (eager: the module; inductor: its compiled form)."""

    def tagging(self, prepared: Prepared) -> ContextManager[Any]:
        """Context that puts module paths into the profiled forwards (eager: hook ranges)."""
        return contextlib.nullcontext()

    def sync_impl(self, prepared: Prepared, out: Any) -> None:
        torch_sync(prepared.device)

    def profile_impl(self, prepared: Prepared, steps: int, raw_dir: Path) -> Path:
        """One step profiled with shapes and FLOPs, then `steps` timed ones without, given the
        first's shapes (porter.targets.kineto_shapes: with shapes, eager elementwise ops on
        large tensors page-fault and read 3-4x their cost); one pass with shapes when the
        steps' ops differ."""
        from porter.targets.kineto_shapes import copy_shapes

        path, shaped = raw_dir / "trace.json", raw_dir / "shapes.json"
        self._profiled_steps(prepared, 1, shaped, shapes=True)
        step_s = self._profiled_steps(prepared, steps, path, shapes=False)
        copied = copy_shapes(shaped, path)
        if copied.complete:
            prepared.info["shapes_from"] = "one step profiled with shapes (copied to the timed steps)"
        else:
            step_s = self._profiled_steps(prepared, steps, path, shapes=True)
            prepared.info["shapes_from"] = (f"every timed step ({copied.steps - copied.matched} of {copied.steps} "
                                            "steps ran other ops than the shapes step)")
        shaped.unlink(missing_ok=True)
        prepared.info["profiled_step_s"] = step_s
        return path

    def _profiled_steps(self, prepared: Prepared, steps: int, path: Path, shapes: bool) -> list[float]:
        """One profiler warm-up step (dropped by the schedule), then `steps` recorded ones
        written to path; each recorded step's wall time."""
        from porter.runtime.timing import timed_call

        acts = [ProfilerActivity.CPU]
        if prepared.device in ("cuda", "rocm"):
            acts.append(ProfilerActivity.CUDA)
        step_s: list[float] = []
        cpu_s: list[float] = []
        sched = schedule(wait=0, warmup=1, active=steps, repeat=1)
        with profile(activities=acts, schedule=sched, record_shapes=shapes, with_flops=shapes, with_stack=False,
                     on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof, self.tagging(prepared):
            for i in range(steps + 1):
                wall, cpu = timed_call(lambda: self.run(prepared))
                if i:
                    step_s.append(wall)
                    cpu_s.append(cpu)
                prof.step()
        prepared.info["profiled_step_cpu_s"] = cpu_s
        return step_s

    def module_activations_impl(self, prepared: Prepared, full_modules: tuple[str, ...]) -> Activations:
        """Hooks on the eager module on the same device (see activation_source): each output is
        sketched as it is produced and dropped, so memory stays a few activations."""
        acts = Activations(source=self.activation_source)
        module = prepared.handle
        with torch.no_grad(), module_hooks(module, on_call=lambda *call: record_call(acts, full_modules, *call)):
            module(*prepared.inputs)
            torch_sync(prepared.device)
        note_uncalled(acts, module)
        return acts

    activation_source = "forward hooks on the eager module"

    def run_call_impl(self, module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], device: str) -> Any:
        dev = torch_device(device)
        module = module.to(dev).eval()
        fn = self.module_callable(module)
        with torch.no_grad():
            out = fn(*place(args, dev), **place(kwargs, dev))
        torch_sync(device)
        return out

    def run_op_impl(self, op: Any, args: tuple[Any, ...], kwargs: dict[str, Any], device: str) -> Any:
        dev = torch_device(device)
        fn = self.op_callable(op)
        with torch.no_grad():
            out = fn(*place(args, dev), **place(kwargs, dev))
        torch_sync(device)
        return out

    def module_callable(self, module: torch.nn.Module):
        """How this stack runs one module by itself (eager: the module as is)."""
        return module

    def op_callable(self, op: Any):
        """How this stack runs one aten op by itself (eager: the op as is)."""
        return op


def record_call(acts: Activations, full_modules: tuple[str, ...], path: str, args: Any, kwargs: Any, output: Any) -> None:
    """One module call into acts: its output's sketch (first call of a shared module only) and,
    for the modules asked for by name, the tensor leaves of its (args, kwargs) and output."""
    if path in acts.summaries or path in acts.not_recorded:
        return
    t = first_float_tensor(output)
    if t is None:
        acts.not_recorded[path] = "its output holds no floating-point tensor"
        return
    acts.summaries[path], acts.samples[path] = torch_sketch(t)
    if path in full_modules:
        for side, value in (("in", (args, kwargs)), ("out", output)):
            for i, leaf in enumerate(tensor_leaves(value)):
                acts.calls[call_key(path, side, i)] = to_cpu_copy(leaf)


def note_uncalled(acts: Activations, root: torch.nn.Module) -> None:
    """Modules the forward never called (containers such as ModuleList, unused branches)."""
    for name, mod in root.named_modules():
        path = module_path(name)
        if name and path not in acts.summaries and path not in acts.not_recorded:
            kind = "a container (ModuleList/ModuleDict) that is never called" if isinstance(
                mod, (torch.nn.ModuleList, torch.nn.ModuleDict)) else "never called by this forward"
            acts.not_recorded[path] = kind


class FailedOpWatch(TorchDispatchMode):
    """Notes the first dispatcher op that raises, so a failure can name it."""

    def __init__(self, tracker: ModuleTracker) -> None:
        super().__init__()
        self.tracker = tracker

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        try:
            return func(*args, **(kwargs or {}))
        except Exception:
            if not self.tracker.failed_op:
                self.tracker.failed_op = str(func)
            raise


def tracked_first_run(stack: Stack, prepared: Prepared) -> Any:
    """First eager forward with the module tracker and the failed-op watch on."""
    tracker = ModuleTracker()
    prepared.info["_tracker"] = tracker
    with module_hooks(prepared.handle, tracker=tracker), FailedOpWatch(tracker):
        return stack.run(prepared)
