"""A JAX program (porter.capture.models.jaxprog) prepared and recorded on the xla stack.

The xla stack runs torch models through torchax; a JAX program needs no conversion, so only
preparing and the per-module activations differ: the program is jitted as it is, its module
scopes come from its own named scopes (a function) or from its Flax NNX module tree, and the
profile, timing, ceilings and readers are the xla stack's own.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from porter.targets.base import Activations, CaptureFailure, Prepared


def prepare(stack: Any, model: Any, jdev: Any, device: str, settings: dict[str, Any]) -> Prepared:
    """Jit the program on jdev and compile it now (so a failure names itself here)."""
    import jax

    program = model.program
    try:
        params = jax.device_put(program.params, jdev)
        inputs = tuple(jax.device_put(x, jdev) if hasattr(x, "dtype") else x for x in program.inputs)
    except Exception as exc:
        raise CaptureFailure(f"could not place JAX program {model.name} on {jdev}: {type(exc).__name__}: {exc}") from None
    jitted = jax.jit(lambda p, args: program.call(p, args))
    options = dict(settings.get("xla_options") or {})
    precision = settings.get("jax_precision")
    t0 = time.perf_counter()
    try:
        with jax.default_matmul_precision(precision) if precision else contextlib.nullcontext():
            compiled = jitted.lower(params, inputs).compile(**({"compiler_options": options} if options else {}))
    except Exception as exc:
        raise CaptureFailure(f"JAX program {model.name} failed to compile: {type(exc).__name__}: {exc}") from None
    info = {"jax_device": str(jdev), "compile_s": time.perf_counter() - t0, "program": program.kind,
            **({"tuned": dict(settings)} if settings else {})}
    return Prepared(stack.name, device, model, call=lambda *a: compiled(params, a), inputs=inputs, info=info,
                    handle={"program": program, "params": params})


def activations(prepared: Prepared, full_modules: tuple[str, ...], sketch: Any) -> Activations:
    """Per-module sketches inside a jitted copy of the program (XLA numerics), as the torchax
    path takes them; a function's named scopes have no outputs to hook, so it records none."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from porter.targets.sketch import Summary, positions

    program, params = prepared.handle["program"], prepared.handle["params"]
    acts = Activations(source="sketches computed inside a jitted copy of the program (XLA numerics)")
    if program.kind == "function":
        acts.source = "none: a plain JAX function's named scopes have no outputs porter can hook"
        return acts
    meta: dict[str, tuple[list[int], str]] = {}
    no_float: set[str] = set()
    transformed: set[str] = set()

    def traced(p: Any, args: tuple[Any, ...]) -> Any:
        got: dict[str, Any] = {}

        def on_output(path: str, output: Any) -> None:
            if path in got or path in no_float:
                return
            leaf = next((x for x in jax.tree_util.tree_leaves(output)
                         if hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.floating)), None)
            if leaf is None:
                no_float.add(path)
                return
            if type(leaf).__name__ != "DynamicJaxprTracer":  # inside vmap / scan / grad: the value is not the jit's
                transformed.add(path)
                return
            got[path] = sketch(leaf, positions(int(leaf.size)))
            meta[path] = (list(leaf.shape), jnp.dtype(leaf.dtype).name)

        program.call(p, args, on_output)
        return got

    got = jax.jit(traced)(params, prepared.inputs)
    for path, sk in got.items():
        shape, dtype = meta[path]
        acts.summaries[path] = Summary(shape=shape, dtype=dtype, numel=int(np.prod(shape, dtype=np.int64)),
                                       l2=float(sk["l2"]), max_abs=float(sk["max_abs"]), nan=int(sk["nan"]), inf=int(sk["inf"]))
        acts.samples[path] = np.asarray(sk["samples"], dtype=np.float64)
    acts.not_recorded = {p: "its output holds no floating-point array" for p in no_float}
    acts.not_recorded.update({p: "called inside a jax transformation (vmap, scan, grad): no sketch of it"
                              for p in transformed if p not in acts.summaries})
    for path in program.module_paths:
        if path not in acts.summaries and path not in acts.not_recorded:
            acts.not_recorded[path] = "not called in the forward"
    if full_modules:
        for path in full_modules:
            acts.not_recorded.setdefault(path, "full calls are recorded for torch modules only")
    return acts
