"""What every execution stack provides, and the parts they share.

A TARGET is ``DEVICE[:STACK]`` (``cpu``, ``cuda:inductor``, ``tpu``, ``cpu:ort``; a bare
``xla`` means JAX's default platform). One ``Stack`` subclass per file in porter/targets/
supplies only the stack-specific parts (``*_impl`` methods); the public methods check
state and arguments once, so every stack behaves the same at the edges (Polygraphy's
runner pattern). The shared capture workflow lives in porter.capture.run.capture().

Module tags: on every stack, each module's work is wrapped in a named range
``porter.module:<path>``, where path is the qualified name from named_modules() with "."
replaced by "/" (e.g. ``blocks/0/attn``); the root module's path is "" and gets no range.
Profiler readers take the innermost such range as an op's module. Stacks whose compiler
would be changed by hooks (inductor) take module paths from the compiler instead.
"""

from __future__ import annotations

import abc
import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Iterator

import torch

if TYPE_CHECKING:
    import pandas as pd

from porter.core.errors import PorterError, TargetUnavailable
from porter.core.targetspec import AUTO_DEVICE
from porter.core.tags import module_path, module_range
from porter.targets.failure import CaptureFailure, describe_failure
from porter.targets.outputs import output_leaves

@dataclass(frozen=True)
class Availability:
    """Whether a stack can run on a device here; when not, why and what to do instead."""

    ok: bool
    reason: str = ""
    remedy: str = ""

    def raise_if_missing(self, target: str) -> None:
        if not self.ok:
            raise TargetUnavailable(f"target {target} is not available: {self.reason}", hint=self.remedy or None)


@dataclass
class Prepared:
    """A model made ready on one stack and device (moved, compiled or exported).

    ``call`` runs one forward on stack-native inputs and returns stack-native outputs;
    ``inputs`` are the example inputs already placed for the stack. ``info`` carries
    stack facts for the manifest (compiled region count, export path, backend, ...).
    """

    stack: str
    device: str
    model: Any  # porter.capture.models.ModelSpec
    call: Callable[..., Any]
    inputs: tuple[Any, ...]
    info: dict[str, Any] = field(default_factory=dict)
    handle: Any = None  # stack-private state (compiled fn, session, torchax env, ...)


@dataclass
class Activations:
    """Per-module records of one unprofiled forward, keyed by module path (porter.targets.sketch).

    Every called module gets a sketch (summary + fixed-seed samples of its first floating
    output); ``calls`` holds full tensors only for the modules asked for by name (the tensor
    leaves of their (args, kwargs) and output, keyed by sketch.call_key); ``not_recorded``
    says why a module has no sketch (never called, no floating-point output).
    """

    summaries: dict[str, Any] = field(default_factory=dict)  # path -> sketch.Summary
    samples: dict[str, Any] = field(default_factory=dict)  # path -> float64 numpy samples
    calls: dict[str, torch.Tensor] = field(default_factory=dict)
    not_recorded: dict[str, str] = field(default_factory=dict)
    source: str = ""  # how they were taken, e.g. "hooks", "eager hooks on the same device"


def first_float_tensor(value: Any) -> torch.Tensor | None:
    """The first floating-point tensor of a pytree (porter.targets.outputs.output_leaves), or None."""
    return next((t for t in output_leaves(value) if t.is_floating_point()), None)


def tensor_leaves(value: Any) -> list[torch.Tensor]:
    """Every tensor leaf of a pytree, in flatten order (the order a recorded call is saved in)."""
    return [t for t in torch.utils._pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]


def first_tensor(value: Any) -> torch.Tensor | None:
    """The first tensor of an output pytree (porter.targets.outputs.output_leaves), or None:
    the model's final output on every stack."""
    leaves = output_leaves(value)
    return leaves[0] if leaves else None


class ModuleTracker:
    """Knows which module is running, so a failure can name it (innermost wins)."""

    def __init__(self) -> None:
        self.stack: list[str] = []
        self.failed_in: str | None = None
        self.failed_op: str = ""  # set by stacks that watch the dispatcher

    @property
    def current(self) -> str | None:
        return self.stack[-1] if self.stack else None


def torch_range(qualified_name: str) -> ContextManager[Any]:
    """The profiler range that tags a module's work in torch traces: porter.module:<path>."""
    return torch.profiler.record_function(module_range(module_path(qualified_name)))


@contextlib.contextmanager
def module_hooks(
    root: torch.nn.Module,
    *,
    scope: Callable[[str], ContextManager[Any]] | None = None,
    tracker: ModuleTracker | None = None,
    on_output: Callable[[str, Any, Any], None] | None = None,
    on_call: Callable[[str, tuple[Any, ...], dict[str, Any], Any], None] | None = None,
) -> Iterator[None]:
    """Install forward pre/post hooks on every submodule of root for the duration.

    scope(qualified_name): a context entered around each module's forward, the way a stack
    tags a module's work (torch: torch_range; XLA: a jax.named_scope); None tags nothing.
    tracker: keep the running module stack (for naming the module a failure happened in).
    on_output(path, inputs, output): called after each module's forward.
    on_call(path, args, kwargs, output): the same, with the keyword arguments of the call.
    Hooks are always removed and scopes closed, also when the forward raises.
    """
    handles = []
    open_scopes: dict[int, list[Any]] = {}

    def pre(name: str, path: str, mod: torch.nn.Module, args: Any) -> None:
        if tracker is not None:
            tracker.stack.append(path)
        if scope is not None:
            ctx = scope(name)
            ctx.__enter__()
            open_scopes.setdefault(id(mod), []).append(ctx)

    def post(path: str, mod: torch.nn.Module, args: Any, kwargs: dict[str, Any], output: Any) -> None:
        if scope is not None:
            stack = open_scopes.get(id(mod))
            if stack:
                stack.pop().__exit__(None, None, None)
        if tracker is not None and tracker.stack and tracker.stack[-1] == path:
            tracker.stack.pop()
        if on_output is not None:
            on_output(path, args, output)
        if on_call is not None:
            on_call(path, args, kwargs, output)

    for name, mod in root.named_modules():
        if not name:
            continue  # the root is the whole step; it carries no module path
        path = module_path(name)
        handles.append(mod.register_forward_pre_hook(lambda m, a, _n=name, _p=path: pre(_n, _p, m, a)))
        handles.append(mod.register_forward_hook(lambda m, a, k, o, _p=path: post(_p, m, a, k, o), with_kwargs=True))
    try:
        yield
    except BaseException:
        if tracker is not None and tracker.failed_in is None:
            tracker.failed_in = tracker.current
        raise
    finally:
        for h in handles:
            h.remove()
        for stack in open_scopes.values():  # a forward that raised leaves scopes open
            while stack:
                stack.pop().__exit__(None, None, None)


class Stack(abc.ABC):
    """One execution stack (torch eager, inductor, torchax/XLA, ONNX Runtime).

    Subclasses set ``name``, ``devices`` and ``trace_format`` and implement the
    ``*_impl`` methods; the public methods around them are shared and final.
    """

    name: str = ""
    devices: tuple[str, ...] = ()
    trace_format: str = ""  # the profilers/ reader FORMAT of the raw trace profile() writes
    module_attribution: str = "hooks"  # or "compiler": where module paths in the trace come from
    no_module_runs: str = ""  # why run_module is not offered on this stack ("" = it is)
    no_op_runs: str = ""  # why run_op is not offered on this stack ("" = it is)
    # Optional work, offered by defining it (a stack that does not gets the reason above filled in):
    # run_call_impl(module, args, kwargs, device) -> stack-native output of module(*args, **kwargs)
    # run_op_impl(op, args, kwargs, device) -> stack-native output of one aten op; CPU torch inputs.
    run_call_impl: Callable[..., Any]
    run_op_impl: Callable[..., Any]
    native_module_outputs: bool = True  # module_activations reflect this stack's own numerics
    dtypes: tuple[str, ...] = ("fp32", "fp64", "bf16", "fp16")  # what `--dtype` may ask of it (porter.capture.precision)
    dtype_note: str = ""  # why a dtype is missing from dtypes
    autocast_note: str = ""  # why `--autocast` is not offered ("" = the model's forward may run under torch.autocast)
    tuned_keys: tuple[str, ...] = ()  # recipe settings (porter.analysis.recipes) this stack applies when preparing

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A stack without a single-module or single-op runner says so as data, so callers report
        the reason (accuracy 'skipped: ...') instead of reaching a method that is not there."""
        super().__init_subclass__(**kwargs)
        if not hasattr(cls, "run_call_impl") and not cls.no_module_runs:
            cls.no_module_runs = f"porter has no single-module runner for {cls.__name__}"
        if not hasattr(cls, "run_op_impl") and not cls.no_op_runs:
            cls.no_op_runs = f"porter has no single-op runner for {cls.__name__}"

    # ---- public API (shared) ----
    def availability(self, device: str) -> Availability:
        """Can this stack run on device here? Never raises."""
        if device != AUTO_DEVICE and device not in self.devices:
            return Availability(
                False,
                f"the {self.name} stack does not run on {device}",
                f"use one of: {', '.join(f'{d}:{self.name}' for d in self.devices)}",
            )
        try:
            return self.availability_impl(self.resolve_device(device))
        except Exception as exc:  # a broken install is a reason, not a crash
            return Availability(False, f"{self.name} failed to load: {type(exc).__name__}: {exc}", "check the installation")

    def resolve_device(self, device: str) -> str:
        """AUTO_DEVICE -> the concrete device this stack would use (default: cpu)."""
        return self.resolve_device_impl() if device == AUTO_DEVICE else device

    def prepare(self, model: Any, device: str) -> Prepared:
        """Place/compile/export the model for this stack; CaptureFailure names op and module."""
        self.availability(device).raise_if_missing(f"{device}:{self.name}")
        return self.prepare_impl(model, self.resolve_device(device))

    def prepare_tuned(self, model: Any, device: str, settings: dict[str, Any]) -> Prepared:
        """prepare() with a tune recipe's stack settings (compile mode, XLA options, session
        options); the model-level ones (layout, precision) are the caller's. A plain compile
        with no recording config: what a user's own run would do."""
        self.availability(device).raise_if_missing(f"{device}:{self.name}")
        unknown = sorted(k for k in settings if k not in self.tuned_keys)
        if unknown:
            raise PorterError(f"the {self.name} stack does not apply {', '.join(unknown)}")
        return self.prepare_tuned_impl(model, self.resolve_device(device), dict(settings))

    def prepare_tuned_impl(self, model: Any, device: str, settings: dict[str, Any]) -> Prepared:
        return self.prepare_impl(model, device)

    def first_run(self, prepared: Prepared) -> Any:
        """The first forward (compiles lazily-compiled stacks); failures become CaptureFailure
        naming the op and module, with the full error text kept on it as `detail`."""
        try:
            return self.first_run_impl(prepared)
        except PorterError:
            raise
        except Exception as exc:
            failure = self.describe_failure_impl(prepared, exc)
            failure.detail = failure.detail or "".join(__import__("traceback").format_exception(exc))
            raise failure from exc

    def run(self, prepared: Prepared, inputs: tuple[Any, ...] | None = None) -> Any:
        """One forward, finished on the device (synchronised) before returning."""
        out = prepared.call(*(prepared.inputs if inputs is None else inputs))
        self.sync_impl(prepared, out)
        return out

    def profile(self, prepared: Prepared, steps: int, warmup: int, raw_dir: Path) -> Path:
        """Warm up, then profile `steps` forwards under the stack's own profiler.

        Writes the raw trace into raw_dir and returns its path (readable by the
        profilers/ reader named trace_format), one profiler step per forward.
        """
        if steps < 1 or warmup < 0:
            raise PorterError(f"steps must be >= 1 and warmup >= 0 (got {steps}, {warmup})")
        raw_dir = Path(raw_dir)
        raw_dir.mkdir(parents=True, exist_ok=True)
        for _ in range(warmup):
            self.run(prepared)
        path = self.profile_impl(prepared, steps, raw_dir)
        if not path.is_file():
            raise PorterError(f"{self.name} profiler wrote no trace", path=path)
        return path

    def outputs(self, prepared: Prepared, inputs: tuple[Any, ...] | None = None) -> torch.Tensor:
        """Final model output of one forward as a CPU torch tensor (first tensor if nested)."""
        out = self.to_torch_cpu_impl(self.run(prepared, inputs))
        t = first_tensor(out)
        if t is None:
            raise PorterError(f"model {prepared.model.name} returned no tensor on {self.name}")
        return t

    def module_activations(self, prepared: Prepared, full_modules: tuple[str, ...] = ()) -> Activations:
        """Per-module sketches of one unprofiled forward, and the full calls of full_modules."""
        return self.module_activations_impl(prepared, tuple(full_modules))

    def run_call(self, module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], device: str) -> Any:
        """module(*args, **kwargs) alone on this stack, fed CPU torch values (any pytree, non-tensor
        arguments included, as a recorded call holds them); the output pytree on the CPU (an HF
        ModelOutput stays one). Compiling stacks compile the module by itself, once."""
        if self.no_module_runs:
            raise PorterError(f"the {self.name} stack does not run single modules: {self.no_module_runs}")
        if not isinstance(module, torch.nn.Module):
            raise PorterError(f"run_call needs a torch.nn.Module, not {type(module).__name__}")
        return self.to_torch_cpu_impl(self.run_call_impl(module, tuple(args), dict(kwargs), self.resolve_device(device)))

    def run_op(self, op: Any, args: tuple[Any, ...], kwargs: dict[str, Any], device: str) -> Any:
        """One aten op (a torch._ops.OpOverload) alone on this stack, fed CPU torch values; its
        output pytree on the CPU. The op-level replay of a module that introduces error."""
        if self.no_op_runs:
            raise PorterError(f"the {self.name} stack does not run single ops: {self.no_op_runs}")
        return self.to_torch_cpu_impl(self.run_op_impl(op, tuple(args), dict(kwargs), self.resolve_device(device)))

    def run_module(self, module: torch.nn.Module, inputs: tuple[Any, ...], device: str) -> torch.Tensor:
        """Run one submodule alone on this stack, fed CPU torch inputs; its output as a CPU tensor.

        Shadow mode for accuracy (porter.analysis.accuracy.shadow_run): the module sees the source
        run's recorded input, so its error against the source's output is its own (local)
        error, not what it inherited upstream. Compiling stacks compile the submodule by itself.
        """
        if self.no_module_runs:
            raise PorterError(f"the {self.name} stack does not run single modules: {self.no_module_runs}")
        if not isinstance(module, torch.nn.Module):
            raise PorterError(f"run_module needs a torch.nn.Module, not {type(module).__name__}")
        out = first_tensor(self.to_torch_cpu_impl(self.run_call_impl(module, tuple(inputs), {}, self.resolve_device(device))))
        if out is None:
            raise PorterError(f"module {type(module).__name__} returned no tensor on {self.name}")
        return out

    def attribute_modules(self, prepared: Prepared, ops: "pd.DataFrame") -> "pd.DataFrame":
        """Fill ops.module where the trace itself carries no module ranges (compiler-attributed
        stacks map kernels to modules from compile-time metadata). Default: as read."""
        return self.attribute_modules_impl(prepared, ops)

    def attribute_modules_impl(self, prepared: Prepared, ops: "pd.DataFrame") -> "pd.DataFrame":
        return ops

    def versions(self) -> dict[str, str]:
        """Framework/runtime versions for the manifest."""
        return {"torch": torch.__version__, **self.versions_impl()}

    def device_info(self, device: str) -> dict[str, Any]:
        """Device name, driver/runtime versions for the manifest (never raises)."""
        try:
            return self.device_info_impl(self.resolve_device(device))
        except Exception as exc:
            return {"type": device, "name": "", "error": f"{type(exc).__name__}: {exc}"}

    def ceilings(self, device: str, dtype: torch.dtype) -> dict[str, Any]:
        """Measured matmul FLOP/s (in dtype) and copy bytes/s on the device, once per capture."""
        return self.ceilings_impl(self.resolve_device(device), dtype)

    # ---- stack-specific parts ----
    @abc.abstractmethod
    def availability_impl(self, device: str) -> Availability: ...

    def resolve_device_impl(self) -> str:
        return "cpu"

    @abc.abstractmethod
    def prepare_impl(self, model: Any, device: str) -> Prepared: ...

    def first_run_impl(self, prepared: Prepared) -> Any:
        """Default: a forward with tracking hooks on the torch module (no ranges)."""
        if prepared.model.module is None:  # a JAX program: no torch modules to hook
            return self.run(prepared)
        tracker = ModuleTracker()
        prepared.info["_tracker"] = tracker
        with module_hooks(prepared.model.module, tracker=tracker):
            return self.run(prepared)

    def describe_failure_impl(self, prepared: Prepared, exc: BaseException) -> CaptureFailure:
        tracker = prepared.info.pop("_tracker", None)
        if prepared.model.module is None:
            return CaptureFailure(f"{prepared.model.name} failed on {self.name}: {type(exc).__name__}: {exc}")
        return describe_failure(exc, prepared.model.module, self.name,
                                tracked_module=tracker.failed_in if tracker else None,
                                tracked_op=getattr(tracker, "failed_op", ""))

    @abc.abstractmethod
    def sync_impl(self, prepared: Prepared, out: Any) -> None:
        """Block until the work of the last call is finished on the device."""

    @abc.abstractmethod
    def profile_impl(self, prepared: Prepared, steps: int, raw_dir: Path) -> Path: ...

    def to_torch_cpu_impl(self, out: Any) -> Any:
        """Stack-native output -> torch CPU tensors (torch stacks: .cpu())."""
        return torch.utils._pytree.tree_map(lambda t: t.detach().cpu() if isinstance(t, torch.Tensor) else t, out)

    @abc.abstractmethod
    def module_activations_impl(self, prepared: Prepared, full_modules: tuple[str, ...]) -> Activations: ...

    def versions_impl(self) -> dict[str, str]:
        return {}

    def device_info_impl(self, device: str) -> dict[str, Any]:
        from porter.targets.ceilings import torch_device_info

        return torch_device_info(device)

    def ceilings_impl(self, device: str, dtype: torch.dtype) -> dict[str, Any]:
        from porter.targets.ceilings import torch_ceilings

        return torch_ceilings(device, dtype)
