"""Predicted status per stack, read from the stack's own registries (nothing runs):

- inductor: ``torch._inductor.lowering.fallbacks`` (make_fallback), ``lowerings``, and
  ``select_decomp_table()``; an op in none of them takes inductor's implicit fallback.
- xla (torchax): the environment's op registry (``env._ops``) and its decompositions
  (``env._decomps``); torchax intercepts only the aten/prims-level namespaces it knows.
- ort: the ONNX nodes the exporter writes for the op, each looked up in ONNX Runtime's kernel
  registry for the execution provider, the node's opset and its input types.
Both torch stacks also consult the dispatcher: an op with a CompositeImplicitAutograd kernel
is decomposed by torch itself before any stack sees it.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import torch

from porter.ops.inventory import Variant, core_aten_table, decompose, op_name
from porter.ops.matrix import DECOMPOSED, HOST_FALLBACK, NATIVE, UNSUPPORTED, Verdict


def implicit_decomposition(op: Any) -> bool:
    """Torch decomposes the op itself (a CompositeImplicitAutograd kernel in the dispatcher)."""
    return torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd")


def _cia_table(op: Any) -> dict[Any, Any]:
    return {op: lambda *a, **k: op.decompose(*a, **k)}


@lru_cache(maxsize=1)
def inductor_tables() -> tuple[Any, Any, Any]:
    from torch._inductor.decomposition import select_decomp_table
    from torch._inductor.lowering import fallbacks, lowerings

    return lowerings, fallbacks, select_decomp_table()


def predict_inductor(v: Variant) -> Verdict:
    lowerings, fallbacks, decomps = inductor_tables()
    op = v.op
    if op in fallbacks:
        return Verdict(HOST_FALLBACK, "registered with make_fallback: inductor calls the eager ATen kernel")
    if op in decomps:
        return Verdict(DECOMPOSED, "in inductor's decomposition table", decompose(op, v.args, v.kwargs, decomps))
    if op in lowerings:
        return Verdict(NATIVE, "inductor lowering registered (torch._inductor.lowering.lowerings)")
    if implicit_decomposition(op):
        return Verdict(DECOMPOSED, "CompositeImplicitAutograd: torch decomposes it before inductor",
                       decompose(op, v.args, v.kwargs, _cia_table(op)))
    return Verdict(HOST_FALLBACK, f"no lowering or decomposition for {op_name(op)}: inductor's implicit fallback calls its eager kernel")


@lru_cache(maxsize=1)
def torchax_env() -> Any:
    from porter.targets.torchax_shim import import_torchax

    return import_torchax().default_env()


TORCHAX_NAMESPACES = ("aten", "_c10d_functional", "torchvision", "xla")  # what its dispatch mode intercepts


def torchax_lookup(op: Any) -> tuple[str, Any]:
    """('ops' | 'decomps' | '', entry): where torchax's environment finds the op."""
    env = torchax_env()
    for kind, table in (("ops", env._ops), ("decomps", env._decomps)):
        entry = table.get(op) or table.get(op.overloadpacket)
        if entry is not None:
            return kind, entry
    return "", None


def predict_xla(v: Variant) -> Verdict:
    op = v.op
    kind, entry = torchax_lookup(op)
    if kind == "ops":
        return Verdict(NATIVE, f"torchax op registry: {getattr(entry.func, '__name__', entry.func)}")
    if kind == "decomps":
        table = {op: entry.func}
        return Verdict(DECOMPOSED, "torchax decomposition (torchax.decompositions)", decompose(op, v.args, v.kwargs, table))
    if op.namespace not in TORCHAX_NAMESPACES:
        return Verdict(UNSUPPORTED, f"torchax does not intercept namespace {op.namespace!r}: no JAX lowering")
    if implicit_decomposition(op):
        return Verdict(DECOMPOSED, "not in torchax's registry; CompositeImplicitAutograd decomposes it",
                       decompose(op, v.args, v.kwargs, _cia_table(op)))
    table = core_aten_table()
    if op in table:
        return Verdict(UNSUPPORTED, "not in torchax's registry (a core ATen decomposition exists to register)")
    return Verdict(UNSUPPORTED, "not in torchax's op registry or decompositions")


@lru_cache(maxsize=1)
def ort_kernels() -> dict[tuple[str, str, str], list[Any]]:
    """(provider, domain, op_type) -> kernel defs of this onnxruntime build."""
    from onnxruntime.capi import _pybind_state as C

    table: dict[tuple[str, str, str], list[Any]] = {}
    for d in C.get_all_opkernel_def():
        table.setdefault((d.provider, d.domain or "ai.onnx", d.op_name), []).append(d)
    return table


def ort_kernel_for(provider: str, domain: str, op_type: str, opset: int, input_type: str | None) -> str:
    """'' when this build has a kernel for the node; else why not."""
    defs = ort_kernels().get((provider, domain or "ai.onnx", op_type), [])
    if not defs:
        if onnx_function(domain, op_type, opset):
            return ""
        return f"no {provider} kernel for {domain or 'ai.onnx'}::{op_type}"
    in_range = [d for d in defs if d.version_range[0] <= opset <= d.version_range[1]]
    if not in_range:
        return f"no {provider} kernel for {op_type} at opset {opset}"
    if input_type and not any(input_type in types for d in in_range for types in d.type_constraints.values()) \
            and all(d.type_constraints for d in in_range):
        return f"no {provider} kernel for {op_type} with {input_type}"
    return ""


def onnx_function(domain: str, op_type: str, opset: int) -> bool:
    """The ONNX spec defines the op as a function (a body of other ops) that ORT inlines."""
    import onnx.defs

    try:
        return bool(onnx.defs.get_schema(op_type, opset, domain or "").has_function)
    except Exception:
        return False


COMPUTE_FREE = {"Constant", "Identity"}


def predict_ort(nodes: list[tuple[str, str, str | None]], opset: int, provider: str) -> Verdict:
    """nodes: (domain, op_type, first input's ONNX type) of the op's exported graph."""
    work = [n for n in nodes if n[1] not in COMPUTE_FREE] or nodes
    missing = [why for d, t, ty in work if (why := ort_kernel_for(provider, d, t, opset, ty))]
    if missing:
        return Verdict(UNSUPPORTED, "; ".join(missing))
    names = [t if not d else f"{d}::{t}" for d, t, _ in work]
    inlined = [t for d, t, _ in work if not ort_kernels().get((provider, d or "ai.onnx", t))]
    if inlined:
        return Verdict(DECOMPOSED, f"{', '.join(inlined)}: no {provider} kernel; ORT inlines the ONNX function body", names)
    if len(work) <= 1:
        return Verdict(NATIVE, f"ONNX {', '.join(names) or '(no node)'}: {provider} kernel registered (opset {opset})")
    return Verdict(DECOMPOSED, f"exported as {len(work)} ONNX nodes, each with a {provider} kernel", names)
