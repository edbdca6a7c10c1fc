"""One timed step of a case on one target: the model built as the case says, made ready by
the target's own Stack (prepare + first run, which compiles), then a synchronised callable.

Inference steps are exactly what `porter capture` times (Stack.run). A train step (forward,
sum-loss backward, SGD update) exists on the torch stacks only: XLA via torchax and ONNX
Runtime are benchmarked here as inference engines, so a train case on them is recorded as
a failure with that reason rather than timed as something else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from porter.bench.suite import Case
from porter.capture.models import ModelSpec, fingerprint, load_model
from porter.core.errors import PorterError
from porter.core.stacks import STACKS
from porter.targets import Stack, resolve
from porter.targets.base import first_tensor
from porter.targets.ceilings import torch_sync

TRAIN_LR = 1e-4  # small enough that a few hundred steps keep the numbers finite


@dataclass
class Step:
    """A ready step: run() does one synchronised step; the rest describes where it ran."""

    target: str
    stack: Stack
    device: str
    run: Callable[[], Any]
    info: dict[str, Any] = field(default_factory=dict)


def case_model(case: Case) -> ModelSpec:
    """The case's model in its dtype, fed inputs of its shapes (same seed on every stack)."""
    spec = load_model(case.model)
    dtype = getattr(torch, case.dtype)
    module = spec.module.to(dtype)
    tensors = [x for x in spec.example_inputs if isinstance(x, torch.Tensor)]
    if case.shapes and len(case.shapes) != len(tensors):
        raise PorterError(f"case {case.name}: {len(case.shapes)} shapes given for {len(tensors)} tensor inputs")
    g = torch.Generator().manual_seed(0)
    inputs: list[Any] = []
    k = 0
    for x in spec.example_inputs:
        if not isinstance(x, torch.Tensor):
            inputs.append(x)
            continue
        shape = case.shapes[k] if case.shapes else tuple(x.shape)
        k += 1
        if x.is_floating_point():
            inputs.append(torch.randn(shape, generator=g).to(dtype) if case.shapes else x.to(dtype))
        else:  # token ids and the like: stay in the factory's value range
            inputs.append(torch.randint(0, int(x.max()) + 1, shape, generator=g, dtype=x.dtype) if case.shapes else x)
    return ModelSpec(spec.name, module, tuple(inputs), dtype, fingerprint(module), spec.source)


def _train_step(stack: Stack, prepared: Any) -> Callable[[], Any]:
    module: torch.nn.Module = prepared.handle
    module.train()
    fn = torch.compile(module) if STACKS[stack.name].compiles_train_step else module
    opt = torch.optim.SGD(module.parameters(), lr=TRAIN_LR)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        out = first_tensor(fn(*prepared.inputs))
        if out is None:
            raise PorterError("the model returned no tensor to take a loss of")
        out.float().sum().backward()
        opt.step()
        torch_sync(prepared.device)

    return step


def prepare_step(case: Case, target: str) -> Step:
    """Resolve, check availability, prepare and run once (compile); errors propagate."""
    spec, stack = resolve(target)
    stack.availability(spec.device).raise_if_missing(spec.text)
    if case.mode == "train" and not STACKS[stack.name].train_step:
        trains = [name for name, info in STACKS.items() if info.train_step]
        raise PorterError(f"train mode runs on the {' and '.join(trains)} stacks, not {stack.name}")
    model = case_model(case)
    if case.recipes_for(target):
        return _tuned_step(case, model, spec.text, stack.resolve_device(spec.device), stack)
    prepared = stack.prepare(model, spec.device)
    if case.mode == "train":
        run = _train_step(stack, prepared)
        run()  # compiles forward and backward
    else:
        stack.first_run(prepared)

        def run() -> Any:
            return stack.run(prepared)

    info = {k: v for k, v in prepared.info.items() if not k.startswith("_") and isinstance(v, (str, int, float, bool))}
    return Step(spec.text, stack, prepared.device, run, info)


def _tuned_step(case: Case, model: ModelSpec, target: str, device: str, stack: Stack) -> Step:
    """The target with porter tune's recipes applied (porter.capture.tuned), as tune measured it."""
    from porter.analysis.fixes import load_catalogue
    from porter.analysis.recipes import combine
    from porter.capture.tuned import prepare_side

    if case.mode != "inference":
        raise PorterError(f"case {case.name!r}: tuned targets run in inference mode only")
    side_stack = STACKS[stack.name].catalogue_key(device)
    by_name = {r.name: r for r in load_catalogue().recipes(side_stack)}
    names = case.recipes_for(target)
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise PorterError(f"case {case.name!r}: no recipe {unknown[0]!r} for {side_stack}")
    settings = combine(tuple(by_name[n] for n in names))
    if settings is None:
        raise PorterError(f"case {case.name!r}: recipes {', '.join(names)} set one thing two ways")
    side = prepare_side(model, target, settings)
    info = {"tuned": "+".join(names)}
    return Step(target, stack, side.prepared.device, side.step(), info)


__all__ = ["Step", "case_model", "prepare_step"]
