"""Down to the op in a rewrite: which JAX op of a module's rewrite first computes something the
PyTorch original never does.

The two sides have no op in common to pair by name (torch's ``native_layer_norm`` is one op,
Flax's LayerNorm a dozen), so they are compared by what they compute. Both modules run on the
same recorded call, each as a jaxpr evaluated one primitive at a time: the PyTorch module
lowered through torchax (its aten ops decomposed into the same primitives), the JAX module as
written. Every value the rewrite computes is then looked up among the original's values (the
same element count, relative L2 within the tolerance): matched, or not.

A rewrite may compute the same thing another way (a variance as E[x^2] - E[x]^2), so an
unmatched value alone is no bug: it must never be matched again downstream. The op named is
the first whose inputs are all matched (or weights and literals) and whose output, and every
value computed from it, is matched nowhere in the original: where the two computations part for
good. Its counterpart in the original is the op of the same primitive on the same inputs, and
the literals of both are shown (a wrong epsilon reads ``add(f32[4,64,1], 0.1)`` against
``add(f32[4,64,1], 1e-05)``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

# Primitives that only move or copy values: their output is matched when their inputs are.
MOVES = {"broadcast_in_dim", "reshape", "transpose", "squeeze", "expand_dims", "copy", "copy_p", "slice",
         "dynamic_slice", "concatenate", "rev", "pad", "gather", "split"}
# Primitives whose inner jaxpr is evaluated in place, so the values inside are seen one by one.
INLINED = {"pjit", "jit", "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr",
           "remat", "checkpoint"}
MAX_STEPS = 5000  # primitives evaluated per module; a longer one is cut and says so


@dataclass(frozen=True)
class Lit:
    """A literal argument of a primitive (an epsilon, a scale)."""

    value: Any


@dataclass
class Step:
    index: int
    primitive: str
    inputs: list[int | Lit]  # value ids, or literals
    outputs: list[int]
    dtype_change: bool = False  # a convert_element_type to another dtype (a precision loss, never a move)
    to_dtype: str = ""  # that dtype
    where: str = ""  # the user's source line that made it


@dataclass
class ValueTrace:
    """Every value a function computed, in order (ids index values)."""

    steps: list[Step] = field(default_factory=list)
    values: list[Any] = field(default_factory=list)
    inputs: list[int] = field(default_factory=list)
    given: set[int] = field(default_factory=set)  # constants: weights closed over
    outputs: list[int] = field(default_factory=list)
    cut: bool = False

    def add(self, value: Any) -> int:
        self.values.append(value)
        return len(self.values) - 1


def _is_literal(v: Any) -> bool:
    return type(v).__name__ == "Literal"


def _inner(eqn: Any) -> tuple[Any, list[Any]] | None:
    """(jaxpr, consts) of an eqn evaluated in place, else None."""
    if eqn.primitive.name not in INLINED:
        return None
    for key in ("jaxpr", "call_jaxpr", "fun_jaxpr"):
        j = eqn.params.get(key)
        if j is None:
            continue
        if hasattr(j, "eqns"):  # an open Jaxpr
            return j, []
        if hasattr(j, "jaxpr") and hasattr(j, "consts"):
            return j.jaxpr, list(j.consts)
    return None


def _short(file_name: str) -> str:
    """A library's file from its package on (flax/nnx/nn/normalization.py), a user's by its name."""
    parts = file_name.replace("\\", "/").split("/")
    if "site-packages" in parts:
        return "/".join(parts[parts.index("site-packages") + 1:])
    return parts[-1]


def _where(eqn: Any) -> str:
    """file:line (function) that made the op, and the user's line that called into a library for it."""
    try:
        from jax._src import source_info_util  # the frames jax's own errors print (jax's internals left out)

        frames = list(source_info_util.user_frames(eqn.source_info.traceback))
    except Exception:  # noqa: BLE001 - a location is a courtesy
        return ""
    if not frames:
        return ""
    said = lambda f: f"{_short(f.file_name)}:{f.start_line} ({f.function_name})"  # noqa: E731
    own = next((f for f in frames if "site-packages" not in f.file_name and "/porter/" not in f.file_name), None)
    return said(frames[0]) + (f", called from {said(own)}" if own is not None and own is not frames[0] else "")


def _evaluate(jaxpr: Any, consts: list[Any], args: list[int], trace: ValueTrace, env_consts: bool) -> list[int | Lit]:
    env: dict[Any, int] = {}
    for v, c in zip(jaxpr.constvars, consts):
        env[v] = trace.add(c)
        if env_consts:
            trace.given.add(env[v])
    for v, a in zip(jaxpr.invars, args):
        env[v] = a

    def read(v: Any) -> int | Lit:
        return Lit(v.val) if _is_literal(v) else env[v]

    def value(x: int | Lit) -> Any:
        return x.value if isinstance(x, Lit) else trace.values[x]

    for eqn in jaxpr.eqns:
        if len(trace.steps) >= MAX_STEPS:
            trace.cut = True
            break
        ins = [read(v) for v in eqn.invars]
        inner = _inner(eqn)
        if inner is not None:
            sub, sub_consts = inner
            ids = [x if isinstance(x, int) else trace.add(x.value) for x in ins]
            outs = _evaluate(sub, sub_consts, ids, trace, env_consts=True)
        else:
            with eqn.ctx.manager:
                got = eqn.primitive.bind(*[value(x) for x in ins], **eqn.primitive.get_bind_params(eqn.params))
            got = list(got) if eqn.primitive.multiple_results else [got]
            outs = [trace.add(g) for g in got]
            to = str(eqn.params.get("new_dtype") or "") if eqn.primitive.name == "convert_element_type" else ""
            change = bool(to) and to != str(getattr(value(ins[0]), "dtype", ""))
            trace.steps.append(Step(len(trace.steps), eqn.primitive.name, ins, [o for o in outs if isinstance(o, int)],
                                    change, to if change else "", _where(eqn)))
        for v, o in zip(eqn.outvars, outs):
            if type(v).__name__ != "DropVar":
                env[v] = o if isinstance(o, int) else trace.add(o.value)
    return [read(v) for v in jaxpr.outvars]


def trace_values(fn: Callable[..., Any], args: tuple[Any, ...]) -> ValueTrace:
    """fn(*args) evaluated one primitive at a time (closed-over arrays are the given weights)."""
    import jax

    closed = jax.make_jaxpr(fn)(*args)
    trace = ValueTrace()
    flat = jax.tree_util.tree_leaves(args)
    trace.inputs = [trace.add(a) for a in flat]
    outs = _evaluate(closed.jaxpr, list(closed.consts), trace.inputs, trace, env_consts=True)
    trace.outputs = [o if isinstance(o, int) else trace.add(o.value) for o in outs]
    return trace


def torch_values(module: Any, args: tuple[Any, ...]) -> ValueTrace:
    """A torch module on a call, lowered through torchax: its aten ops as JAX primitives."""
    import jax.numpy as jnp
    import torch

    from porter.targets.torchax_shim import import_torchax

    torchax = import_torchax()
    weights, fn = torchax.extract_jax(module)
    as_jax = tuple(jnp.asarray(a.detach().cpu().numpy()) if isinstance(a, torch.Tensor) else a for a in args)
    return trace_values(lambda *a: fn(weights, a), as_jax)


def _flat(x: Any) -> np.ndarray | None:
    a = np.asarray(x)
    if a.dtype.kind not in "fc" or a.size == 0:
        return None
    return a.astype(np.float64).ravel()


class _Index:
    """The original's values by element count, for lookups by value."""

    def __init__(self, trace: ValueTrace):
        self.by_size: dict[int, list[tuple[int, np.ndarray, float]]] = {}
        for i, v in enumerate(trace.values):
            f = _flat(v)
            if f is not None:
                self.by_size.setdefault(f.size, []).append((i, f, float(np.linalg.norm(f))))

    def find(self, x: Any, tol: float, every: bool = False) -> list[int]:
        """The original's values within relative L2 tol of x: the first found, or every one."""
        f = _flat(x)
        if f is None:
            return []
        n = float(np.linalg.norm(f))
        found = []
        for i, g, gn in self.by_size.get(f.size, ()):
            if abs(n - gn) > tol * max(gn, 1e-30):  # the norms alone rule it out
                continue
            err = float(np.linalg.norm(f - g)) / gn if gn > 0 else (0.0 if n == 0 else np.inf)
            if err <= tol:
                found.append(i)
                if not every:
                    break
        return found


@dataclass
class Divergence:
    """Where the rewrite's computation leaves the original's for good."""

    step: Step | None
    rewrite: ValueTrace
    original: ValueTrace
    counterpart: Step | None = None
    rel_l2: float = float("nan")  # the op's output against its counterpart's
    matched: int = 0  # values of the rewrite found in the original
    computed: int = 0
    why: str = ""


def _describe(trace: ValueTrace, step: Step) -> str:
    parts = []
    for x in step.inputs:
        if isinstance(x, Lit):
            v = np.asarray(x.value)
            parts.append(f"{v.item():.6g}" if v.size == 1 else f"literal{list(v.shape)}")
        else:
            a = trace.values[x]
            parts.append(f"{np.dtype(a.dtype).name}{list(np.shape(a))}")
    return f"{step.primitive}({', '.join(parts)}{' -> ' + step.to_dtype if step.to_dtype else ''})"


def describe(trace: ValueTrace, step: Step | None) -> str:
    return _describe(trace, step) if step is not None else ""


def diverging_op(original: ValueTrace, rewrite: ValueTrace, tol: float) -> Divergence:
    """The rewrite's op where it parts from the original for good (module docstring)."""
    index = _Index(original)
    status: dict[int, str] = {}  # value id -> "given" | "matched" | "unmatched"
    for i in rewrite.given:
        status[i] = "given"
    for i in rewrite.inputs:
        status[i] = "matched" if index.find(rewrite.values[i], tol) else "unmatched"
    matched = computed = 0
    for s in rewrite.steps:
        ins = [status.get(x, "given") for x in s.inputs if isinstance(x, int)]
        for o in s.outputs:
            if all(x == "given" for x in ins):
                status[o] = "given"
                continue
            if s.primitive in MOVES and not s.dtype_change and all(x != "unmatched" for x in ins):
                status[o] = "matched"
                continue
            computed += 1
            status[o] = "matched" if index.find(rewrite.values[o], tol) else "unmatched"
            matched += status[o] == "matched"
    consumers: dict[int, list[Step]] = {}
    for s in rewrite.steps:
        for x in s.inputs:
            if isinstance(x, int):
                consumers.setdefault(x, []).append(s)

    def parts_for_good(s: Step) -> bool:
        seen, todo = set(s.outputs), list(s.outputs)
        while todo:
            for c in consumers.get(todo.pop(), ()):
                for o in c.outputs:
                    if o in seen:
                        continue
                    if status.get(o) == "matched":
                        return False
                    seen.add(o)
                    todo.append(o)
        return True

    for s in rewrite.steps:
        if not s.outputs or any(status.get(o) != "unmatched" for o in s.outputs):
            continue
        if any(status.get(x) == "unmatched" for x in s.inputs if isinstance(x, int)):
            continue
        if not parts_for_good(s):
            continue
        d = Divergence(s, rewrite, original, matched=matched, computed=computed)
        d.counterpart = _counterpart(s, rewrite, original, index, tol)
        if d.counterpart is not None:
            from porter.analysis.accuracy import error_metrics

            got, ref = np.asarray(rewrite.values[s.outputs[0]]), np.asarray(original.values[d.counterpart.outputs[0]])
            if got.size == ref.size:
                d.rel_l2 = error_metrics(ref.astype(np.float64), got.astype(np.float64)).rel_l2
        return d
    why = "the rewrite's values all have a counterpart in the original" if all(
        status.get(o) != "unmatched" for o in rewrite.outputs) else "no single op: the two part ways gradually"
    return Divergence(None, rewrite, original, matched=matched, computed=computed,
                      why=why + (f" (cut at {MAX_STEPS} ops)" if rewrite.cut or original.cut else ""))


def _counterpart(step: Step, rewrite: ValueTrace, original: ValueTrace, index: _Index, tol: float) -> Step | None:
    """The original's op of the same primitive taking, for each of step's matched inputs, a
    value equal to it (a value can be held twice: an inner jaxpr's result and its copy)."""
    wants = [set(index.find(rewrite.values[x], tol, every=True)) for x in step.inputs if isinstance(x, int)]
    wants = [w for w in wants if w]
    if not wants:
        return None
    for s in original.steps:
        ids = {x for x in s.inputs if isinstance(x, int)}
        if s.primitive == step.primitive and all(w & ids for w in wants):
            return s
    return None
