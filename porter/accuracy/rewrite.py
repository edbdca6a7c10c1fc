"""Local error and the op, for a model and its rewrite in another framework (a PyTorch model and
its JAX port, paired by parameters: porter.analysis.modulemap).

Both factories run here. One eager forward of the PyTorch model records the suspect module's
call; the rewrite's module (the same weights, its own name) runs on that call, so its error
against the original is the module's alone. Inside it, porter.accuracy.rewrite_ops names the op
where the rewrite's computation leaves the original's.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

from porter.accuracy.local import TOP, LocalRun, hooks_suspended, module_table, one_line, tree_metrics
from porter.accuracy.rewrite_ops import Divergence, Lit, describe, diverging_op, torch_values, trace_values
from porter.targets.base import module_hooks

HOW = ("a rewrite: the source's module and the target's module holding the same weights run here on the module's "
       "call in an eager forward of the source; inside it, the first op of the rewrite whose value, and every value "
       "computed from it, the original never computes (the original lowered through torchax, both evaluated op by op)")


def _recorded_calls(model: Any, paths: list[str]) -> dict[str, tuple[Any, Any, Any]]:
    """The first call (args, kwargs, output) of each path in one eager forward of the source."""
    calls: dict[str, tuple[Any, Any, Any]] = {}

    def keep(path: str, args: Any, kwargs: Any, output: Any) -> None:
        if path in paths and path not in calls:
            calls[path] = (args, kwargs, output)

    with torch.no_grad(), module_hooks(model.module, on_call=keep):
        model.module(*model.example_inputs)
    return calls


def _to_jax(x: Any) -> Any:
    import jax.numpy as jnp

    if isinstance(x, torch.Tensor):
        a = x.detach().cpu().numpy()
        return jnp.asarray(a.astype(np.int32) if a.dtype == np.int64 else a)  # JAX runs 32-bit unless x64 is on
    return x


def _to_torch(x: Any) -> Any:
    import jax

    return jax.tree_util.tree_map(lambda a: torch.from_numpy(np.array(a)) if hasattr(a, "shape") else a, x)


def _inputs(trace: Any, step: Any) -> list[dict[str, Any]]:
    rows = []
    for x in step.inputs:
        if isinstance(x, Lit):
            rows.append({"literal": float(np.asarray(x.value).ravel()[0]) if np.asarray(x.value).size == 1 else None})
            continue
        a = np.asarray(trace.values[x])
        row: dict[str, Any] = {"shape": list(a.shape), "dtype": a.dtype.name}
        if a.size and a.dtype.kind in "fiu":
            v = a.astype(np.float64)
            row.update(min=float(v.min()), max=float(v.max()), mean_abs=float(np.abs(v).mean()))
        rows.append(row)
    return rows


def op_row(d: Divergence) -> dict[str, Any] | None:
    """The named op as the accuracy block's ops rows read (porter.accuracy.live._ops_found)."""
    if d.step is None:
        return None
    return {"op": d.step.primitive, "index": d.step.index, "inputs": _inputs(d.rewrite, d.step),
            "call": describe(d.rewrite, d.step), "source_op": describe(d.original, d.counterpart) or None,
            "where": d.step.where, "chained_rel_l2": d.rel_l2, "local_rel_l2": d.rel_l2,
            "matched_values": [d.matched, d.computed],
            "verdict": ("the rewrite computes this where the original computes "
                        f"{describe(d.original, d.counterpart)}" if d.counterpart is not None else
                        "the original computes nothing equal to this op's value, nor to any value computed from it")}


def rewrite_local(model: Any, target_model: Any, mapping: dict[str, str], suspects: list[str], tol: float,
                  progress: Callable[[str], None]) -> LocalRun:
    """Local error (and the op) of the suspects, each run as the source's module and as the
    rewrite's module on the source's recorded call. mapping: target path -> source path."""
    local = LocalRun(how=HOW)
    program = getattr(target_model, "program", None)
    own = {s: t for t, s in mapping.items()}
    if program is None or getattr(model, "module", None) is None:
        local.not_run = {s: "needs a PyTorch MODEL and its JAX rewrite (--target-model)" for s in suspects}
        return local
    mods = module_table(model)
    calls = _recorded_calls(model, suspects[:TOP])
    for path in suspects[:TOP]:
        target_path = own.get(path, path)
        jax_module = program.module_at(target_path)
        if path not in mods or path not in calls:
            local.not_run[path] = "not called in an eager forward of the source"
            continue
        if jax_module is None:
            local.not_run[path] = f"the rewrite has no module object at {target_path} to run alone"
            continue
        args, kwargs, reference = calls[path]
        progress(f"accuracy: {path} and the rewrite's {target_path} on one recorded call")
        try:
            import jax

            jax_args = jax.tree_util.tree_map(_to_jax, tuple(args), is_leaf=lambda x: isinstance(x, torch.Tensor))
            jax_kwargs = {k: _to_jax(v) for k, v in (kwargs or {}).items()}
            got = _to_torch(jax_module(*jax_args, **jax_kwargs))
            local.metrics[path] = tree_metrics(reference, got)
        except Exception as exc:  # noqa: BLE001 - the rewrite's module may take other arguments: said, not raised
            local.not_run[path] = f"the rewrite's {target_path} did not run on the source's call: {one_line(exc)}"
            continue
        if not local.metrics[path].rel_l2 > tol:
            continue
        if kwargs:
            local.ops[path] = {"first_op": None, "skipped": "the call has keyword arguments: op search takes positional ones"}
            continue
        progress(f"accuracy: {target_path} op by op against {path}")
        try:
            with hooks_suspended(mods[path]):
                original = torch_values(mods[path], tuple(args))
            rewritten = trace_values(lambda *a: jax_module(*a), jax_args)
            found = diverging_op(original, rewritten, tol)
        except Exception as exc:  # noqa: BLE001 - op search is a refinement of the module's verdict
            local.ops[path] = {"first_op": None, "skipped": f"op search failed: {one_line(exc)}"}
            continue
        local.ops[path] = {"first_op": op_row(found), "skipped": found.why or None, "ops": len(rewritten.steps)}
    return local

