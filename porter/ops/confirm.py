"""Confirmed status per stack: each op variation runs alone on the stack (OneOp, fed the inputs
recorded from the model's real forward) and its outputs are checked against an fp64 eager
reference with porter's rule (porter.analysis.accuracy.oracle_verdict: the stack may be at
most m x further from fp64 than eager torch in the same dtype is, plus tolerance/10).

What each stack's run can show beyond "it ran":
- inductor: the generated wrapper code (run_and_get_code); a call into ``torch.ops.<ns>``
  there is a fallback to the eager kernel, even where a lowering is registered (sort, topk).
- xla: which torchax table the op resolved through while jit traced it; jit errors
  (unknown op, data-dependent shape) mean the op cannot run under XLA.
- ort: the exported nodes, then a session on the provider: a node without a kernel fails there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import torch

from porter.analysis.accuracy import oracle_verdict, tolerance_for
from porter.analysis.opcost import canonical_dtype
from porter.ops.inventory import Variant, dtype_name
from porter.ops.matrix import DECOMPOSED, HOST_FALLBACK, MISMATCH, NATIVE, UNSUPPORTED, Verdict
from porter.ops.oneop import OneOp, is_random, output_tensors
from porter.ops import predict

_FALLBACK_CALL = re.compile(r"torch\.ops\.(?!inductor\.)(\w+)\.(\w+)\.(\w+)\(")


@dataclass
class Outcome:
    verdict: Verdict
    outputs: list[torch.Tensor] | None = None  # None when the op did not run


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def first_line(exc: BaseException, about: str = "") -> str:
    """The error's first line, or its first line naming `about` (the op) when there is one."""
    lines = [ln.strip() for ln in _ANSI.sub("", str(exc)).splitlines() if ln.strip()]
    named = [ln for ln in lines if about and about in ln]
    text = (named or lines or [""])[0]
    return f"{type(exc).__name__}: {text[:240]}"


# ---- inductor --------------------------------------------------------------------------------

def run_inductor(v: Variant, one: OneOp) -> Outcome:
    import torch._dynamo
    import torch._inductor.config as inductor_config
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()  # every OneOp shares one forward: no recompile limits, no stale guards
    compiled = torch.compile(one, backend="inductor", fullgraph=True)
    try:
        with inductor_config.patch(fx_graph_cache=False), torch.no_grad():
            out, codes = run_and_get_code(compiled, *[t.clone() for t in one.inputs])
    except Exception as exc:
        return Outcome(Verdict(UNSUPPORTED, f"inductor compile/run failed: {first_line(exc)}"))
    calls = sorted({".".join(m.groups()) for code in codes for m in _FALLBACK_CALL.finditer(code)})
    outputs = output_tensors(out)
    if calls:
        return Outcome(Verdict(HOST_FALLBACK, f"generated code calls {', '.join(calls)} (eager ATen kernel, not generated code)"), outputs)
    predicted = predict.predict_inductor(v)
    if predicted.status == DECOMPOSED:
        return Outcome(Verdict(DECOMPOSED, "compiled to generated code from the decomposition", predicted.ops), outputs)
    return Outcome(Verdict(NATIVE, "compiled to generated code / extern library kernels, no fallback call"), outputs)


def packet(name: str) -> str:
    """'aten.sort.stable' -> 'aten.sort'."""
    return ".".join(name.split(".")[:2])


class Batch(torch.nn.Module):
    """Many OneOps in one graph, each on its own inputs: one compile (one g++ build) for all."""

    def __init__(self, ones: list[OneOp]) -> None:
        super().__init__()
        self.ones = torch.nn.ModuleList(ones)
        self.sizes = [len(o.inputs) for o in ones]

    def forward(self, *flat: Any) -> tuple[Any, ...]:
        outs, i = [], 0
        for one, n in zip(self.ones, self.sizes):
            outs.append(one(*flat[i:i + n]))
            i += n
        return tuple(outs)


def run_inductor_batch(variants: list[Variant], ones: list[OneOp]) -> list[Outcome] | None:
    """Every op compiled in one graph; a fallback call in the generated code is charged to the
    op it names, or to the op whose decomposition contains it. None when the batch does not
    compile (the caller then runs each op alone, which names the one that fails)."""
    import torch._dynamo
    import torch._inductor.config as inductor_config
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    compiled = torch.compile(Batch(ones), backend="inductor", fullgraph=True)
    flat = [t.clone() for one in ones for t in one.inputs]
    try:
        with inductor_config.patch(fx_graph_cache=False), torch.no_grad():
            outs, codes = run_and_get_code(compiled, *flat)
    except Exception:
        return None
    calls = sorted({".".join(m.groups()) for code in codes for m in _FALLBACK_CALL.finditer(code)})
    results = []
    for v, out in zip(variants, outs):
        predicted = predict.predict_inductor(v)
        mine = {packet(v.name)} | {packet(o) for o in predicted.ops}
        hits = [c for c in calls if packet(c) in mine]
        outputs = output_tensors(out)
        if hits:
            results.append(Outcome(Verdict(HOST_FALLBACK, f"generated code calls {', '.join(hits)} (eager ATen kernel, not generated code)"), outputs))
        elif predicted.status == DECOMPOSED:
            results.append(Outcome(Verdict(DECOMPOSED, "compiled to generated code from the decomposition", predicted.ops), outputs))
        else:
            results.append(Outcome(Verdict(NATIVE, "compiled to generated code / extern library kernels, no fallback call"), outputs))
    return results


# ---- xla (torchax) ---------------------------------------------------------------------------

def run_xla(v: Variant, one: OneOp) -> Outcome:
    import jax

    from porter.targets.torchax_shim import import_torchax
    from porter.targets.xla import _to_torch

    tx = import_torchax()
    env = predict.torchax_env()

    def jitted(m: OneOp) -> Any:
        with torch.no_grad():
            weights, fn = tx.extract_jax(m.eval(), env)
        out = jax.jit(fn)(weights, tuple(env.t2j_copy(t.clone()) for t in m.inputs))
        jax.block_until_ready(out)
        return out

    try:
        out = jitted(one)
    except TypeError as exc:
        # the graph leaves trailing defaults out; a module's own call (F.conv2d) passes them,
        # and some torchax implementations need them: retry the way the model would call it
        try:
            out = jitted(OneOp(v, fill_defaults=True))
        except Exception:
            return Outcome(Verdict(UNSUPPORTED, f"jax.jit of the op failed: {first_line(exc)}"))
    except Exception as exc:
        return Outcome(Verdict(UNSUPPORTED, f"jax.jit of the op failed: {first_line(exc)}"))
    outputs = output_tensors(_to_torch(out))  # under jit nothing can fall back to the host: it runs or fails
    kind, _ = predict.torchax_lookup(v.op)
    if kind == "ops":
        return Outcome(Verdict(NATIVE, "jitted through torchax's op registry"), outputs)
    p = predict.predict_xla(v)
    return Outcome(Verdict(DECOMPOSED, f"jitted: {p.evidence}", p.ops), outputs)


# ---- onnxruntime -----------------------------------------------------------------------------

ORT_TYPES = {1: "tensor(float)", 2: "tensor(uint8)", 3: "tensor(int8)", 5: "tensor(int16)", 6: "tensor(int32)",
             7: "tensor(int64)", 9: "tensor(bool)", 10: "tensor(float16)", 11: "tensor(double)", 16: "tensor(bfloat16)"}


def export_onnx(one: OneOp) -> Any:
    """The OneOp as an ONNX ModelProto (torch.onnx.export, dynamo), or raises."""
    import logging
    import warnings

    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            return torch.onnx.export(one, one.inputs, dynamo=True, verbose=False).model_proto
    finally:
        logger.setLevel(level)


def onnx_nodes(model: Any) -> tuple[list[tuple[str, str, str | None]], int]:
    """(domain, op_type, first input's ORT type name) per node, and the default-domain opset."""
    types = {vi.name: ORT_TYPES.get(vi.type.tensor_type.elem_type)
             for vi in list(model.graph.input) + list(model.graph.value_info) + list(model.graph.output)}
    for init in model.graph.initializer:
        types[init.name] = ORT_TYPES.get(init.data_type)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    return [(n.domain, n.op_type, types.get(n.input[0]) if n.input else None) for n in model.graph.node], opset


def run_ort(v: Variant, one: OneOp, provider: str = "CPUExecutionProvider") -> tuple[Verdict, Outcome]:
    """(prediction from the kernel registry, confirmation by a session run)."""
    import onnxruntime as ort

    try:
        model = export_onnx(one)
    except Exception as exc:
        why = Verdict(UNSUPPORTED, f"torch.onnx.export has no translation: {first_line(exc, v.op._opname)}")
        return why, Outcome(why)
    nodes, opset = onnx_nodes(model)
    predicted = predict.predict_ort(nodes, opset, provider)
    try:
        sess = ort.InferenceSession(model.SerializeToString(), providers=[provider])
        feeds = {i.name: t.detach().numpy() for i, t in zip(sess.get_inputs(), one.inputs)}
        out = sess.run(None, feeds)
    except Exception as exc:
        return predicted, Outcome(Verdict(UNSUPPORTED, f"ONNX Runtime session failed: {first_line(exc)}"))
    outputs = [torch.from_numpy(o.copy()) if hasattr(o, "dtype") else torch.as_tensor(o) for o in out]
    status = predicted.status if predicted.status in (NATIVE, DECOMPOSED) else NATIVE
    return predicted, Outcome(Verdict(status, f"ran on {provider}: {predicted.evidence}", predicted.ops), outputs)


# ---- numerics --------------------------------------------------------------------------------

@dataclass
class Numerics:
    ok: bool
    rel_l2: float | None
    tolerance: float | None
    evidence: str


def check_numerics(v: Variant, one: OneOp, got: list[torch.Tensor], same_dtype: list[torch.Tensor],
                   reference: list[torch.Tensor] | None) -> Numerics:
    """Each output against fp64 with oracle_verdict; integer/bool outputs must be equal."""
    if is_random(v):
        return Numerics(True, None, None, "random op: values not compared")
    if len(got) != len(same_dtype):
        return Numerics(False, None, None, f"{len(got)} outputs, eager gives {len(same_dtype)}")
    ref = reference if reference is not None and len(reference) == len(same_dtype) else same_dtype
    worst: float = 0.0
    tol: float | None = None
    for i, (g, e, r) in enumerate(zip(got, same_dtype, ref)):
        if tuple(g.shape) != tuple(e.shape):
            return Numerics(False, None, None, f"output {i} has shape {tuple(g.shape)}, eager {tuple(e.shape)}")
        if e.is_complex():  # real and imaginary parts as floats, under the same rule
            g, e = torch.view_as_real(g.to(e.dtype)), torch.view_as_real(e)
            r = torch.view_as_real(r) if r.is_complex() else e
        if not e.is_floating_point():
            if not torch.equal(g.to(e.dtype), e):
                return Numerics(False, None, None, f"output {i} ({dtype_name(e.dtype)}) differs from eager")
            continue
        if e.numel() == 0:
            continue
        g = g.to(e.dtype)
        special = ~torch.isfinite(e)  # -inf masks, overflow: must match exactly, then drop out
        if special.any():
            if not (torch.equal(special, ~torch.isfinite(g)) and torch.equal(g[special].nan_to_num(), e[special].nan_to_num())):
                return Numerics(False, None, None, f"output {i}: inf/nan positions differ from eager")
            g, e, r = (t.masked_fill(special, 0) for t in (g, e, r))
        dt = canonical_dtype(dtype_name(e.dtype)) or "fp32"
        verdict = oracle_verdict(e, g, r, dtype=dt)
        tol = tolerance_for(dt)
        worst = max(worst, verdict.target_error)
        if not verdict.passed:
            return Numerics(False, verdict.target_error, tol,
                            f"output {i}: rel_l2 vs fp64 {verdict.target_error:.2e} > bound {verdict.bound:.2e} "
                            f"({verdict.multiplier:g} x eager's {verdict.source_error:.2e} + {dt} tolerance {tol:g}/10)")
    return Numerics(True, worst if tol is not None else None, tol, "")


def with_numerics(v: Variant, one: OneOp, outcome: Outcome, same_dtype: list[torch.Tensor],
                  reference: list[torch.Tensor] | None) -> tuple[Verdict, Numerics | None]:
    if outcome.outputs is None:
        return outcome.verdict, None
    num = check_numerics(v, one, outcome.outputs, same_dtype, reference)
    if num.ok:
        return outcome.verdict, num
    return Verdict(MISMATCH, f"{num.evidence}; ran as {outcome.verdict.status}: {outcome.verdict.evidence}",
                   outcome.verdict.ops), num


