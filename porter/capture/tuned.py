"""A model prepared on a stack with a tune recipe's settings applied (porter.analysis.recipes).

Three kinds of setting, applied where they act: the model's own (channels_last layout, a
precision port by cast or autocast) change the ModelSpec before the stack sees it; the
stack's own (compile mode and inductor options, XLA compile options, ORT session options)
go to Stack.prepare_tuned; process-wide torch switches (matmul precision, SDPA backends) are
set around each forward of this side only and restored after, so an untuned side timed
alternately in the same process never runs under them.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

import torch

from porter.capture.models import ModelSpec
from porter.targets import Prepared, Stack, resolve

MODEL_KEYS = ("channels_last", "dtype", "autocast")
CALL_KEYS = ("matmul_precision", "sdpa_backends")


@dataclass
class TunedSide:
    """One side ready to time: its synchronised forward and its final output on the CPU."""

    target: str
    settings: dict[str, Any]
    prepared: Prepared
    stack: Stack
    info: dict[str, Any] = field(default_factory=dict)

    def step(self) -> Callable[[], Any]:
        prepared, stack = self.prepared, self.stack
        return lambda: stack.run(prepared)

    def output(self) -> torch.Tensor:
        return self.stack.outputs(self.prepared)


def channels_last(spec: ModelSpec) -> ModelSpec:
    """A copy of the model and its 4-d floating inputs in torch.channels_last."""
    module = copy.deepcopy(spec.module).to(memory_format=torch.channels_last).eval()
    inputs = tuple(x.contiguous(memory_format=torch.channels_last)
                   if isinstance(x, torch.Tensor) and x.dim() == 4 and x.is_floating_point() else x
                   for x in spec.example_inputs)
    return ModelSpec(spec.name, module, inputs, spec.dtype, spec.fingerprint, spec.source)


def tuned_model(spec: ModelSpec, stack: Stack, target: str, device: str, settings: Mapping[str, Any]) -> ModelSpec:
    """The model as the recipe's model-level settings ask; the given spec is never changed."""
    from porter.capture import precision as p

    if settings.get("dtype"):
        p.check_supported(stack, settings["dtype"], target)
        spec = p.cast_model(spec, settings["dtype"])
    if settings.get("autocast"):
        p.check_autocast(stack, settings["autocast"], target)
        spec = p.autocast_model(spec, settings["autocast"], p.autocast_device(device))
    if settings.get("channels_last"):
        spec = channels_last(spec)
    return spec


SDPA = {"math": "MATH", "flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION"}


@contextlib.contextmanager
def per_call(settings: Mapping[str, Any]) -> Iterator[None]:
    """The recipe's process-wide torch switches for one forward, restored after it."""
    with contextlib.ExitStack() as stack:
        if settings.get("matmul_precision"):
            before = torch.get_float32_matmul_precision()
            torch.set_float32_matmul_precision(settings["matmul_precision"])
            stack.callback(torch.set_float32_matmul_precision, before)
        if settings.get("sdpa_backends"):
            from torch.nn.attention import SDPBackend, sdpa_kernel

            stack.enter_context(sdpa_kernel([getattr(SDPBackend, SDPA[b]) for b in settings["sdpa_backends"]]))
        yield


def prepare_side(spec: ModelSpec, target: str, settings: Mapping[str, Any] | None = None) -> TunedSide:
    """The model on target with settings applied, prepared and run once (compiling stacks compile
    here, so a recipe that fails on this model fails here)."""
    settings = dict(settings or {})
    tspec, stack = resolve(target)
    stack.availability(tspec.device).raise_if_missing(tspec.text)
    device = stack.resolve_device(tspec.device)
    model = tuned_model(spec, stack, tspec.text, device, settings)
    own = {k: v for k, v in settings.items() if k not in MODEL_KEYS + CALL_KEYS}
    prepared = stack.prepare_tuned(model, tspec.device, own)
    if any(settings.get(k) for k in CALL_KEYS):
        plain = prepared.call

        def call(*inputs: Any) -> Any:
            with per_call(settings):
                return plain(*inputs)

        prepared.call = call
    side = TunedSide(tspec.text, settings, prepared, stack)
    stack.run(prepared)
    return side


__all__ = ["TunedSide", "channels_last", "per_call", "prepare_side", "tuned_model"]
