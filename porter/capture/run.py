"""Live capture: run a model on a target under the target's own profiler, into a bundle.

One workflow for every stack (stacks supply only the small parts, see
porter.targets.base.Stack):

1. resolve the target; unavailable -> TargetUnavailable (exit 3), nothing written;
2. prepare (place / compile / export) and a first forward; a failure becomes a failed
   bundle (manifest status "failed", the error, op and module) and a CaptureFailure;
3. numerics of the output (NaN/Inf are flagged, not fatal);
4. per-module activation sketches in a separate, unprofiled forward (bounded, never capped;
   full tensors only for the modules named with --modules);
5. timing of whole forwards, unprofiled, every sample kept;
6. profiled steps under the stack's profiler -> raw trace -> schema tables;
7. device ceilings, versions, manifest; all written through bundle.staging() so an
   interrupted run leaves no partial bundle.

Activation keys are module paths; the model's final output is stored under OUTPUT_KEY
and its first input under INPUT_KEY.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pandas as pd
import torch

from porter.bundles.bundle import (ACTIVATIONS, RAW, base_manifest, encode_tables, file_sha256, staging, write_files,
                                   write_manifest, write_tables)
from porter.core.errors import PorterError
from porter.capture.models import ModelSpec, load_model, module_param_signatures
from porter.core.schema import empty_kernels, empty_ops
from porter.targets import CaptureFailure, Prepared, Stack, resolve
from porter.capture.options import INPUT_KEY, OUTPUT_KEY, CaptureOptions
from porter.capture.quiet import third_party_output
from porter.runtime.policy import MeasurementPolicy, observed
from porter.runtime.timing import Timing, time_steps

@dataclass
class CaptureResult:
    path: Path
    manifest: dict[str, Any]
    ops: pd.DataFrame = field(default_factory=empty_ops)
    # The model still prepared on its stack, so a caller can time it against another
    # (porter.capture.interleaved) without preparing or compiling it again.
    prepared: Prepared | None = None
    stack: Stack | None = None

    def forward(self) -> Callable[[], Any]:
        """One synchronised, unprofiled forward of the captured model."""
        assert self.prepared is not None and self.stack is not None, "capture result without a prepared model"
        prepared, stack = self.prepared, self.stack
        return lambda: stack.run(prepared)


Progress = Callable[[str], None]


def numerics(out: torch.Tensor) -> dict[str, Any]:
    t = out.detach().float()
    nan, inf = bool(torch.isnan(t).any()), bool(torch.isinf(t).any())
    finite = t[torch.isfinite(t)]
    return {
        "nan": nan,
        "inf": inf,
        "nan_count": int(torch.isnan(t).sum()),
        "inf_count": int(torch.isinf(t).sum()),
        "ok": not (nan or inf),
        "abs_max": float(finite.abs().max()) if finite.numel() else float("nan"),
        "shape": list(out.shape),
        "dtype": str(out.dtype).replace("torch.", ""),
    }


def save_activations(dirpath: Path, acts: Any, final: torch.Tensor | None, first_input: Any,
                     full_modules: tuple[str, ...]) -> dict[str, Any]:
    """activations/: every module's sketch, the model's output and input in full, and the full
    calls of full_modules (porter.targets.sketch). Nothing is capped: what is not recorded is
    listed with its reason."""
    from safetensors.torch import save_file

    from porter.targets.sketch import SAMPLES, save_sketches

    dirpath.mkdir(parents=True, exist_ok=True)
    save_sketches(dirpath, acts.summaries, acts.samples)
    outputs = {OUTPUT_KEY: final.contiguous()} if final is not None else {}
    inputs = {INPUT_KEY: first_input.detach().cpu().contiguous()} if isinstance(first_input, torch.Tensor) else {}
    save_file(outputs, str(dirpath / "outputs.safetensors"))
    save_file(inputs, str(dirpath / "inputs.safetensors"))
    save_file({k: v.contiguous() for k, v in acts.calls.items()}, str(dirpath / "modules.safetensors"))
    saved = sorted({k.rpartition("#")[0] for k in acts.calls})
    missing = {m: acts.not_recorded.get(m, "no module with this path was called") for m in full_modules if m not in saved}
    return {"source": acts.source, "sketched": len(acts.summaries), "samples_per_module": SAMPLES,
            "not_recorded": dict(sorted(acts.not_recorded.items())), "full_modules": saved,
            "full_modules_missing": missing, "full_bytes": int(sum(t.numel() * t.element_size() for t in acts.calls.values())),
            "output_key": OUTPUT_KEY, "input_key": INPUT_KEY}


def module_share(ops: pd.DataFrame) -> float:
    """Share of device time on ops that carry a module path."""
    total = float(ops["device_us"].sum())
    return float(ops.loc[ops["module"] != "", "device_us"].sum()) / total if total > 0 else float("nan")


def top_modules(ops: pd.DataFrame, n: int = 5) -> list[dict[str, Any]]:
    by = ops[ops["module"] != ""].groupby("module")["device_us"].sum().sort_values(ascending=False)
    total = float(ops["device_us"].sum()) or 1.0
    return [{"module": k, "device_us": float(v), "share": float(v) / total} for k, v in by.head(n).items()]


def _manifest(model: ModelSpec, target: str, stack: Stack, dev: str, opts: CaptureOptions, **fields: Any) -> dict[str, Any]:
    return base_manifest(
        label=f"{model.name}@{target}",
        kind="capture",
        model={"name": model.name, "source": model.source, "fingerprint": model.fingerprint,
               "params": model.param_count, "input_shapes": model.input_shapes(),
               "dtype": str(model.dtype).replace("torch.", ""), "module_params": module_param_signatures(model)},
        target={"text": target, "device": dev, "stack": stack.name,
                "module_attribution": stack.module_attribution},
        profiler=stack.trace_format,
        steps=opts.steps,
        warmup=opts.warmup,
        versions=stack.versions(),
        **fields,
    )


def write_failed(dest: Path, model: ModelSpec, target: str, stack: Stack, device: str, opts: CaptureOptions,
                 failure: CaptureFailure, prepared: Prepared | None) -> None:
    """A bundle that records what failed and where, with empty tables."""
    files = encode_tables(empty_ops(), empty_kernels())
    with staging(dest) as tmp:
        write_files(tmp, files)
        info = {k: v for k, v in (prepared.info if prepared else {}).items() if not k.startswith("_")}
        write_manifest(tmp, _manifest(
            model, target, stack, device, opts, status="failed",
            error={"message": failure.problem, "op": failure.op, "module": failure.module, "detail": failure.detail},
            device=stack.device_info(device), stack_info=info,
        ))


def capture(model_ref: str | ModelSpec, target: str, dest: Path, opts: CaptureOptions | None = None,
            progress: Progress = lambda msg: None, policy: MeasurementPolicy | None = None) -> CaptureResult:
    """Run model_ref on target and write a capture bundle at dest (see module doc).
    policy: the measurement policy the caller opened (porter.runtime.policy.measured); without
    one, what is in force is observed and recorded (the manifest's `measurement`)."""
    opts = opts or CaptureOptions()
    if opts.steps < 1 or opts.warmup < 0 or opts.repeats < 1:
        raise PorterError(f"--steps and repeats must be >= 1 and --warmup >= 0 (got {opts.steps}, {opts.warmup})")
    spec, stack = resolve(target)
    stack.availability(spec.device).raise_if_missing(spec.text)
    model = load_model(model_ref) if isinstance(model_ref, str) else model_ref
    if model.program is not None and stack.name != "xla":
        raise PorterError(f"{model.name} is a JAX program: it runs on XLA, not on the {stack.name} stack",
                          hint=f"capture it with --on xla (or {spec.device}:xla)")
    model, precision = _precision(model, stack, spec, opts)
    device = stack.resolve_device(spec.device)
    with third_party_output() as native:  # Kineto's USDT lines, JAX's warnings: into the bundle's log
        policy = (policy or observed(opts.warmup)).with_devices(stack.device_info(device).get("type") == "cpu")
        result = _run(model, spec, stack, device, Path(dest), opts, progress, precision, policy)
    native.save(result.path)
    return result


def _precision(model: ModelSpec, stack: Stack, spec: Any, opts: CaptureOptions) -> tuple[ModelSpec, dict[str, Any]]:
    """The model as the precision port asks (--dtype casts it, --autocast wraps its forward),
    and the manifest's `precision` record ({} when neither is asked)."""
    if not (opts.dtype or opts.autocast):
        return model, {}
    from porter.capture import precision as p

    if opts.dtype and opts.autocast:
        raise PorterError("--dtype and --autocast are two ways to lower precision; give one")
    if opts.dtype:
        dtype = p.parse_dtype(opts.dtype)
        p.check_supported(stack, dtype, spec.text)
        return p.cast_model(model, dtype), {
            "dtype": dtype, "model_dtype": p.torch_name(model.dtype) or str(model.dtype),
            "how": "floating weights, buffers and inputs cast to the dtype (--dtype); integer inputs kept"}
    dtype = p.parse_dtype(opts.autocast)
    p.check_autocast(stack, dtype, spec.text)
    device_type = p.autocast_device(stack.resolve_device(spec.device))
    return p.autocast_model(model, dtype, device_type), {
        "dtype": dtype, "autocast": dtype, "autocast_device": device_type,
        "model_dtype": p.torch_name(model.dtype) or str(model.dtype),
        "how": f"the forward under torch.autocast({device_type!r}, {dtype}) (--autocast): weights and inputs as given, "
               "matmuls and convolutions in the lower dtype"}


def _run(model: ModelSpec, spec: Any, stack: Stack, device: str, dest: Path, opts: CaptureOptions,
         progress: Progress, precision: dict[str, Any] | None, policy: MeasurementPolicy) -> CaptureResult:
    """Steps 2-7 of the module doc, for a resolved, available target."""
    from profilers.detect import read_trace

    prepared: Prepared | None = None
    try:
        progress(f"preparing {model.name} on {spec.text}")
        prepared = stack.prepare(model, spec.device)
        progress(f"first forward on {spec.text} (compiles when the stack compiles)")
        t0 = time.perf_counter()
        stack.first_run(prepared)
        prepared.info["first_run_s"] = time.perf_counter() - t0
    except CaptureFailure as failure:
        write_failed(dest, model, spec.text, stack, device, opts, failure, prepared)
        failure.bundle = str(dest)
        raise
    assert prepared is not None

    final = stack.outputs(prepared)
    nums = numerics(final)

    with staging(dest) as tmp:
        act_info: dict[str, Any] = {"captured": False}
        if opts.activations:
            progress("per-module activations (unprofiled forward)")
            acts = stack.module_activations(prepared, tuple(opts.full_modules))
            act_info = {"captured": True, "native_module_outputs": stack.native_module_outputs,
                        **save_activations(tmp / ACTIVATIONS, acts, final, model.example_inputs[0] if model.example_inputs else None,
                                         tuple(opts.full_modules))}

        progress(f"timing {opts.repeats} forwards ({'process CPU time' if policy.clock == 'cpu' else 'wall time'})")
        timing = time_steps(lambda: stack.run(prepared), opts.warmup, opts.repeats, policy.clock)

        progress(f"profiling {opts.steps} steps")
        raw_path = stack.profile(prepared, opts.steps, opts.warmup, tmp / RAW)
        profiled = Timing(list(prepared.info.get("profiled_step_s", [])))

        progress("reading the trace")
        result = read_trace(raw_path, stack.trace_format)
        ops = stack.attribute_modules(prepared, result.ops)
        write_tables(tmp, ops, result.kernels)

        progress("measuring device ceilings")
        ceilings = stack.ceilings(device, model.dtype)
        wall = Timing(timing.samples_s if timing.clock == "wall" else timing.other_s)  # profiled steps are wall time
        overhead = profiled.median_s / wall.median_s if profiled.samples_s else float("nan")
        info = {k: v for k, v in prepared.info.items() if not k.startswith("_") and k != "profiled_step_s"}
        manifest = _manifest(
            model, spec.text, stack, device, opts,
            status="ok",
            device=stack.device_info(device),
            raw={"path": f"{RAW}/{raw_path.name}", "format": stack.trace_format, "sha256": file_sha256(raw_path),
                 "bytes": raw_path.stat().st_size},
            timing={**timing.to_dict(), "warmup": opts.warmup, "repeats": opts.repeats},
            measurement=policy.finished().to_dict(),
            profiled_timing=profiled.to_dict(),
            profiler_overhead=overhead,
            ceilings=ceilings,
            numerics=nums,
            activations=act_info,
            stack_info=info,
            stats={
                "ops": int(len(ops)), "kernels": int(len(result.kernels)),
                "device_us_total": float(result.kernels["dur_us"].sum()) if len(result.kernels) else 0.0,
                "module_share": module_share(ops),
                "top_modules": top_modules(ops),
            },
            trace_meta=result.meta.extra,
            **({"precision": precision} if precision else {}),
        )
        write_manifest(tmp, manifest)
    return CaptureResult(dest, manifest, ops, prepared, stack)


__all__ = ["CaptureOptions", "CaptureResult", "capture", "module_share", "numerics", "OUTPUT_KEY", "INPUT_KEY"]
