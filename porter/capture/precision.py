"""Precision ports: the target runs the model in another dtype than the source (``--dtype``).

A port to bf16 or fp16 is a common reason accuracy moves between stacks; porter runs it
the plain way a user would: the model's floating weights and buffers and its floating
inputs are cast to the dtype (integer inputs such as token ids stay). The cast model keeps
the source model's fingerprint: it is the same model, run at another precision, and the
manifest says so (``model.dtype``, ``precision``). Which dtypes a stack runs is the stack's
own statement (``Stack.dtypes``); any other is a one-line error before anything runs.

Autocast (``--autocast bf16``) is the other common port: weights stay float32 and
torch.autocast runs matmuls and convolutions in the lower dtype, norms and reductions in
float32. Only the torch stacks offer it (``Stack.autocast_note`` says why another does not).
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from porter.core.errors import PorterError

# canonical name -> torch dtype; the names porter's tolerance table uses (porter.analysis.accuracy)
DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "fp64": torch.float64, "bf16": torch.bfloat16,
                                  "fp16": torch.float16}
ALIASES = {"float32": "fp32", "float": "fp32", "float64": "fp64", "double": "fp64", "bfloat16": "bf16",
           "float16": "fp16", "half": "fp16"}


def parse_dtype(text: str) -> str:
    """'bf16', 'bfloat16', 'torch.float16', 'half' ... -> the canonical name; else a one-line error."""
    raw = str(text).strip().lower().removeprefix("torch.")
    name = ALIASES.get(raw, raw)
    if name not in DTYPES:
        raise PorterError(f"--dtype {text!r} is not a dtype porter runs", hint=f"use one of: {', '.join(DTYPES)}")
    return name


def torch_name(dtype: torch.dtype) -> str:
    """torch.bfloat16 -> 'bf16' (the canonical name), '' for a dtype porter does not cast to."""
    return next((k for k, v in DTYPES.items() if v == dtype), "")


def check_supported(stack: Any, dtype: str, target: str) -> None:
    """A one-line error (exit 2) when the stack does not run this dtype."""
    if dtype not in stack.dtypes:
        why = f": {stack.dtype_note}" if getattr(stack, "dtype_note", "") else ""
        raise PorterError(f"target {target} does not run --dtype {dtype}{why}",
                          hint=f"{stack.name} runs: {', '.join(stack.dtypes)}")


def check_autocast(stack: Any, dtype: str, target: str) -> None:
    """A one-line error (exit 2) when the stack does not run under torch.autocast, or the dtype is not a half type."""
    if stack.autocast_note:
        raise PorterError(f"target {target} does not run --autocast: {stack.autocast_note}",
                          hint="use --dtype to cast the model instead")
    if dtype not in ("bf16", "fp16"):
        raise PorterError(f"--autocast {dtype}: autocast lowers precision to bf16 or fp16 only")


def autocast_device(device: str) -> str:
    """The torch.autocast device_type of a porter device ('rocm' runs as 'cuda')."""
    return "cuda" if device in ("cuda", "rocm") else device


def with_autocast(module: torch.nn.Module, dtype: str, device_type: str, every: bool = False) -> torch.nn.Module:
    """module (in place) with its forward run under torch.autocast(device_type, dtype); every:
    each submodule's too, so a submodule run by itself (a local run) autocasts as in the model."""
    dt = DTYPES[dtype]
    for m in (module.modules() if every else (module,)):
        inner = m.forward

        def forward(*args: Any, _inner: Any = inner, **kwargs: Any) -> Any:
            with torch.autocast(device_type=device_type, dtype=dt):
                return _inner(*args, **kwargs)

        m.forward = forward
    return module


def autocast_model(spec: Any, dtype: str, device_type: str) -> Any:
    """A copy of a ModelSpec whose forward runs under torch.autocast (weights and inputs as given)."""
    from porter.capture.models import ModelSpec

    module = with_autocast(copy.deepcopy(spec.module).eval(), dtype, device_type)
    return ModelSpec(spec.name, module, spec.example_inputs, spec.dtype, spec.fingerprint, spec.source)


def cast_tree(value: Any, dtype: torch.dtype) -> Any:
    """Every floating tensor leaf of a pytree (args, kwargs, an output) cast to dtype."""
    return torch.utils._pytree.tree_map(
        lambda t: t.to(dtype) if isinstance(t, torch.Tensor) and t.is_floating_point() else t, value)


def cast_model(spec: Any, dtype: str) -> Any:
    """A copy of a porter.capture.models.ModelSpec run in dtype (the source spec is untouched).

    Same name, source and fingerprint (the same model at another precision); weights,
    buffers and floating example inputs cast."""
    from porter.capture.models import ModelSpec

    dt = DTYPES[dtype]
    if spec.dtype == dt:
        return spec
    if spec.program is not None:  # a JAX program: its floating parameters and inputs, in jax
        import dataclasses

        from porter.capture.models import jaxprog

        program = jaxprog.cast(spec.program, str(dt).replace("torch.", ""))
        return dataclasses.replace(spec, program=program, example_inputs=tuple(program.inputs), dtype=dt)
    module = copy.deepcopy(spec.module).to(dt).eval()
    return ModelSpec(spec.name, module, tuple(cast_tree(tuple(spec.example_inputs), dt)), dt, spec.fingerprint,
                     spec.source)
