"""`porter capture` (one model on one target, under its profiler), and what it can run:
`porter models` and `porter targets`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from porter.cli.console import Table, err, fail, out, print_measurement
from porter.core.errors import PorterError
from porter.core.units import fmt_us
from porter.runtime.policy import WARMUP


def capture(
    model: str = typer.Argument("transformer", help="Built-in model name (see `porter models`), FILE.py:factory or package.module:factory."),
    on: str = typer.Option("cpu", "--on", help="Target DEVICE[:STACK], e.g. cpu, cpu:inductor, cuda, tpu, xla, cpu:ort (see `porter targets`)."),
    out_dir: Optional[Path] = typer.Option(None, "-o", "--out", help="Bundle directory to write (default: captures/MODEL@TARGET)."),
    steps: int = typer.Option(5, "--steps", help="Profiled forwards."),
    warmup: int = typer.Option(WARMUP, "--warmup", help="Unrecorded forwards before timing and before profiling (the measurement policy's default)."),
    repeats: int = typer.Option(20, "--repeats", help="Timed (unprofiled) forwards."),
    no_activations: bool = typer.Option(False, "--no-activations", help="Skip saving per-module activations."),
    modules: Optional[list[str]] = typer.Option(None, "--modules", help="Module path (repeatable) whose full input and output tensors are saved; every other module keeps a bounded sketch. Name the suspects a diagnose of two bundles lists."),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="Run the model cast to fp32, fp64, bf16 or fp16 (weights, buffers and floating inputs): one side of a precision port."),
    autocast: Optional[str] = typer.Option(None, "--autocast", help="Run the forward under torch.autocast to bf16 or fp16 (torch stacks): one side of a precision port."),
) -> None:
    """Run MODEL on a target under the target's own profiler and write a capture bundle.

    Example: porter capture transformer --on cpu:inductor -o captures/tf_inductor
    """
    from porter.pipeline.preflight import check_run

    try:
        check_run(model, [on])  # before torch loads
    except PorterError as exc:
        fail(exc)
    from porter.capture.options import CaptureOptions
    from porter.capture.run import capture as run_capture
    from porter.runtime.policy import measured

    dest = out_dir or Path("captures") / f"{Path(model).stem if ':' in model else model}@{on.replace(':', '_')}"
    opts = CaptureOptions(steps=steps, warmup=warmup, repeats=repeats, activations=not no_activations,
                          full_modules=tuple(p for m in modules or () for p in m.split(",") if p), dtype=dtype or "",
                          autocast=autocast or "")
    try:
        with measured(warmup) as policy, err.status("capturing", spinner="dots") as status:
            result = run_capture(model, on, dest, opts, progress=lambda msg: status.update(msg), policy=policy)
    except PorterError as exc:
        fail(exc)
    m = result.manifest
    t, s = m["timing"], m["stats"]
    out.print(f"{m['model']['name']} on {m['target']['text']} ({m['device'].get('name') or m['device'].get('type')}) -> {result.path}", highlight=False)
    noisy = " [yellow](noisy: spread above 10%, rerun on a quiet machine)[/]" if t["noisy"] else ""
    print_measurement(m["measurement"])
    out.print(f"  step time: median {fmt_us(t['median_s'] * 1e6)} +/- {fmt_us(t['iqr_s'] * 1e6 / 2)} ({'process CPU time' if t.get('clock') == 'cpu' else 'wall time'}; IQR/median {t['spread'] * 100:.0f}%, {len(t['samples_s'])} samples){noisy}", highlight=False)
    out.print(f"  profiler overhead: {m['profiler_overhead']:.2f}x; device time with a module path: {s['module_share'] * 100:.0f}%", highlight=False)
    if not m["numerics"]["ok"]:
        out.print(f"  [bold red]numerics: output has NaN ({m['numerics']['nan_count']}) / Inf ({m['numerics']['inf_count']})[/]")
    if m.get("stack_info", {}).get("compiled_regions") is not None:
        out.print(f"  compiled regions: {m['stack_info']['compiled_regions']}, graph breaks: {m['stack_info'].get('graph_breaks', 0)}")
    if m.get("precision"):
        out.print(f"  precision: {m['precision']['dtype']} ({m['precision']['how']})", highlight=False)
    acts = m.get("activations") or {}
    if acts.get("full_modules"):
        out.print(f"  full module calls saved: {', '.join(acts['full_modules'])}", highlight=False)
    for path, why in (acts.get("full_modules_missing") or {}).items():
        out.print(f"  [yellow]--modules {path}: not saved ({why})[/]", highlight=False)
    for row in s["top_modules"]:
        out.print(f"    {row['module']:<32} {fmt_us(row['device_us'])} ({row['share'] * 100:.1f}%)", highlight=False)


def models() -> None:
    """List the built-in models with parameter counts and input shapes."""
    from porter.capture.models import load_model
    from porter.capture.models.zoo import BUILTINS

    table = Table(title="built-in models (or pass FILE.py:factory / package.module:factory)", title_justify="left")
    for col in ("name", "params", "inputs", "about"):
        table.add_column(col)
    for name, b in BUILTINS.items():
        spec = load_model(name)
        table.add_row(name, f"{spec.param_count:,}", " ".join(str(tuple(s)) for s in spec.input_shapes()), b.about)
    out.print(table)


def targets(
    timeout: float = typer.Option(60.0, "--timeout", help="Seconds each stack's probe may take (its own process) before its row says it hangs."),
) -> None:
    """List targets (DEVICE:STACK) and whether each can run on this machine, and if not why.

    Each stack is probed in its own process, a row printed as soon as its stack answers."""
    from porter.pipeline.probe import probe_targets

    width = 16
    out.print(f"{'target':<{width}} {'available':<9}  reason / remedy", style="bold", highlight=False)
    for row in probe_targets(timeout):
        why = "" if row.ok else row.reason + (f"; {row.remedy}" if row.remedy else "")
        out.print(f"{row.target:<{width}} {'yes' if row.ok else 'no':<9}  {why}", highlight=False, markup=False,
                  soft_wrap=True)
