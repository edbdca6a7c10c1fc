"""`porter ops` as one function: a model (or core ATen) and a list of targets in, a costed
Matrix out. Each target is checked for availability first; one that cannot run here becomes
a stack entry saying why, never an error."""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import torch

from porter.analysis.fixes import load_catalogue
from porter.core.errors import PorterError
from porter.core.stacks import STACKS, ops_stacks
from porter.ops import confirm
from porter.ops.cost import cost_matrix
from porter.ops.inventory import Variant, core_aten_table, decompose, inventory
from porter.ops.matrix import Cell, Matrix, OpRow, StackInfo, Verdict
from porter.ops.oneop import OneOp, eager, fp64_reference
from porter.targets import resolve

DEFAULT_TARGETS = ("xla", "cpu:inductor", "cpu:ort")
ORT_PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider", "rocm": "ROCMExecutionProvider"}


def stack_infos(targets: list[str], run: bool = True, mode: str = "model") -> list[tuple[StackInfo, str, str]]:
    """(info, stack name, device) per target; unknown target text is a PorterError."""
    out = []
    for text in targets:
        spec, stack = resolve(text)
        if spec.stack not in ops_stacks():
            raise PorterError(f"porter ops has no registry reader for stack {spec.stack!r}",
                              hint=f"use one of: {', '.join(ops_stacks())}")
        a = stack.availability(spec.device)
        info = StackInfo(spec.text, a.ok, "" if a.ok else f"not available: {a.reason}")
        if a.ok and STACKS[spec.stack].ops_exports and mode == "core-aten":
            info = StackInfo(spec.text, False, "not available in --all-core-aten: exporting each op to ONNX "
                                               "alone takes seconds per op; check a model's ops with porter ops MODEL --on cpu:ort")
        if a.ok:
            info.versions = stack.versions()
        out.append((info, spec.stack, stack.resolve_device(spec.device)))
    return out


INDUCTOR_BATCH = 16  # ops compiled together: one g++ build instead of one per op
INDUCTOR_RUNNER = "porter.ops.confirm:run_inductor"  # the runner whose ops compile in batches


def _named(ref: str) -> Callable:
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def predictor(stack: str) -> Callable[[Variant], Verdict]:
    """The stack's registry predictor (porter.core.stacks names it)."""
    return _named(STACKS[stack].ops_predictor)


def runner(stack: str) -> Callable[[Variant, OneOp], confirm.Outcome]:
    return _named(STACKS[stack].ops_runner)


@dataclass
class ReadyOp:
    """One op variation made ready to run: its module, eager output and fp64 reference."""

    variant: Variant
    one: OneOp | None  # None: predicted only (no inputs, or eager rejects them)
    same: list[torch.Tensor] = field(default_factory=list)
    ref: list[torch.Tensor] | None = None


def prepare(v: Variant, run: bool) -> ReadyOp:
    if not run or v.args is None:  # core ATen ops OpInfo gave no inputs are predicted only
        return ReadyOp(v, None)
    one = OneOp(v)
    try:
        same = eager(one)
    except Exception:  # eager itself rejects these inputs: nothing to confirm against
        return ReadyOp(v, None)
    return ReadyOp(v, one, same, fp64_reference(one))


def inductor_outcomes(prepared: list[ReadyOp], progress: Callable[[str], None] | None) -> dict[int, confirm.Outcome]:
    """Runs for every runnable op on inductor: in batches, each op alone where a batch fails."""
    runnable = [i for i, p in enumerate(prepared) if p.one is not None]
    out: dict[int, confirm.Outcome] = {}
    for start in range(0, len(runnable), INDUCTOR_BATCH):
        chunk = runnable[start:start + INDUCTOR_BATCH]
        if progress:
            progress(f"inductor: compiling ops {start + 1}-{start + len(chunk)} of {len(runnable)}")
        got = confirm.run_inductor_batch([prepared[i].variant for i in chunk], [prepared[i].one for i in chunk])
        if got is None:
            got = [confirm.run_inductor(prepared[i].variant, prepared[i].one) for i in chunk]
        out.update(zip(chunk, got))
    return out


def cell_for(stack: str, device: str, p: ReadyOp, ran: confirm.Outcome | None = None) -> Cell:
    v, one = p.variant, p.one
    if STACKS[stack].ops_exports:
        if one is None:
            return Cell(Verdict("unsupported", "not run: no inputs to export the op with"))
        predicted, outcome = confirm.run_ort(v, one, ORT_PROVIDERS.get(device, "CPUExecutionProvider"))
    else:
        predicted = predictor(stack)(v)
        if one is None:
            return Cell(predicted)
        outcome = ran or runner(stack)(v, one)
    verdict, num = confirm.with_numerics(v, one, outcome, p.same, p.ref)
    return Cell(predicted, verdict, num.rel_l2 if num else None, num.tolerance if num else None)


def build_matrix(model_name: str, variants: list[Variant], targets: list[str], *, mode: str = "model",
                 run: bool = True, catalogue: Path | None = None,
                 progress: Callable[[str], None] | None = None) -> Matrix:
    t0 = time.perf_counter()
    stacks = stack_infos(targets, run, mode)
    table = core_aten_table()
    prepared = [prepare(v, run) for v in variants]
    ran = {info.target: inductor_outcomes(prepared, progress)
           for info, stack, _ in stacks if info.available and STACKS[stack].ops_runner == INDUCTOR_RUNNER}
    rows: list[OpRow] = []
    for i, p in enumerate(prepared):
        v = p.variant
        if progress:
            progress(f"op {i + 1}/{len(variants)}: {v.name}")
        row = OpRow(v.name, v.dtypes, v.shape_class, v.calls, v.modules, decompose(v.op, v.args, v.kwargs, table))
        for info, stack, device in stacks:
            if info.available:
                row.cells[info.target] = cell_for(stack, device, p, ran.get(info.target, {}).get(i))
        rows.append(row)
    versions = {"torch": torch.__version__}
    for info, _, _ in stacks:
        versions.update(info.versions)
    matrix = Matrix(model_name, mode, [s for s, _, _ in stacks], rows, versions,
                    datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), 0.0)
    cost_matrix(matrix, load_catalogue(catalogue))
    matrix.seconds = round(time.perf_counter() - t0, 1)
    return matrix


def ops_for_model(model: str, targets: list[str], *, catalogue: Path | None = None,
                  progress: Callable[[str], None] | None = None) -> Matrix:
    """The model's portability matrix: inventory from torch.export, predicted and confirmed."""
    from porter.capture.models import load_model

    spec = load_model(model)
    stack_infos(targets)  # bad target text fails before the export
    if progress:
        progress(f"exporting {spec.name} with torch.export")
    variants = inventory(spec.module, spec.example_inputs, spec.name)
    return build_matrix(spec.name, variants, targets, catalogue=catalogue, progress=progress)


def ops_for_core_aten(targets: list[str], *, catalogue: Path | None = None,
                      progress: Callable[[str], None] | None = None) -> Matrix:
    """Every core ATen op: predicted from each stack's registries, and confirmed by running it
    alone on inputs recorded from torch's OpInfo samples where those reach it."""
    from porter.ops.coreaten import core_aten_variants

    if progress:
        progress("recording core ATen inputs from torch's OpInfo samples")
    return build_matrix("core ATen", core_aten_variants(), targets, mode="core-aten", run=True,
                        catalogue=catalogue, progress=progress)
