"""Down to the op: replay a module's aten ops one at a time on the target stack.

Inside a module that introduces error, a TorchDispatchMode records every aten call of the
module's recorded call on the source (eager, CPU): the op, its arguments and its output.
Each op then runs alone on the target (Stack.run_op: torchax executes it eagerly through
jax, inductor compiles it by itself, ORT does not offer it) twice:

* local: fed the source's own inputs, so its error is the op's alone;
* chained: fed the target's outputs of the earlier ops of the module (the module's inputs
  and weights stay the source's), so the error carried through the module is seen growing.

The op named is the first whose chained error exceeds the tolerance: where the module's
loss appears. Its local error says whether the op itself is inaccurate (local over the
tolerance too) or amplifies the tiny differences it was handed (local within, chained
over: an ill-conditioned formulation such as a one-pass variance).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from porter.analysis.accuracy import error_metrics

MAX_OPS = 400  # ops replayed per module; a module with more is cut and says so
SKIP_OPS = {"aten.detach.default", "aten.lift_fresh.default", "aten._assert_async.msg"}


@dataclass
class OpCall:
    op: Any  # torch._ops.OpOverload
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    output: Any
    input_ids: list[int]  # id() of each tensor argument as the source passed it
    output_ids: list[int]


class OpRecorder(TorchDispatchMode):
    """Records each aten call (cloned inputs and outputs) of a forward on the source."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[OpCall] = []
        self._keep: list[Any] = []  # keeps the source tensors alive so their ids stay unique

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        ins = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        copied = tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, (args, kwargs))
        out = func(*args, **kwargs)
        outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        self._keep.extend(ins + outs)
        self.calls.append(OpCall(func, copied[0], copied[1], tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, out),
                                 [id(t) for t in ins], [id(t) for t in outs]))
        return out


def _float_leaves(value: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor) and t.is_floating_point()]


def leaves_error(reference: Any, actual: Any) -> float:
    """Relative L2 over all floating tensor leaves of two outputs (NaN when there are none)."""
    ref, got = _float_leaves(reference), _float_leaves(actual)
    if not ref or len(ref) != len(got) or any(r.shape != g.shape for r, g in zip(ref, got)):
        return math.nan
    return error_metrics(torch.cat([r.reshape(-1).double() for r in ref]),
                         torch.cat([g.reshape(-1).double() for g in got])).rel_l2


def describe_inputs(args: Any) -> list[dict[str, Any]]:
    """Shape, dtype and value range of each tensor argument (what an engineer checks first)."""
    out = []
    for t in tree_flatten(args)[0]:
        if isinstance(t, torch.Tensor):
            row: dict[str, Any] = {"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", "")}
            if t.numel() and (t.is_floating_point() or not t.dtype.is_complex):
                v = t.detach().double()
                row.update(min=float(v.min()), max=float(v.max()), mean_abs=float(v.abs().mean()))
            out.append(row)
    return out


def record_ops(module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[OpCall]:
    with torch.no_grad(), OpRecorder() as rec:
        module(*args, **kwargs)
    return [c for c in rec.calls if str(c.op) not in SKIP_OPS]


def _as_target(x: Any, cast_to: Any) -> Any:
    return x.to(cast_to) if cast_to is not None and isinstance(x, torch.Tensor) and x.is_floating_point() else x


def _like(x: Any, chained: Any) -> Any:
    """A source input in the dtype the target's op is handed (a precision port casts it)."""
    if isinstance(x, torch.Tensor) and isinstance(chained, torch.Tensor) and x.is_floating_point() and chained.is_floating_point():
        return x.to(chained.dtype)
    return x


def replay_ops(module_path: str, calls: list[OpCall], stack: Any, device: str, tol: float,
               cast_to: Any = None, arrived: dict[int, torch.Tensor] | None = None) -> dict[str, Any]:
    """Per-op rows (local and chained error) and the op named for module_path.

    cast_to: a precision port's torch dtype: the module's inputs and weights reach the
    target's ops in it (the ops' own outputs keep whatever dtype the target gives them),
    and each op's local run gets the source's inputs in the dtype its chained run sees.
    arrived: id() of a module argument as the source passed it -> the value the target's module
    receives instead (an autocast port hands bf16 where the source handed float32).
    Returns {"rows": [...], "first_op": row or None, "skipped": reason or None,
    "first_call": the named op's OpCall, "first_output": the target's local output of it}.
    """
    if stack.no_op_runs:
        return {"rows": [], "first_op": None, "skipped": f"{stack.name}: {stack.no_op_runs}"}
    cut = len(calls) > MAX_OPS
    rows: list[dict[str, Any]] = []
    produced: dict[int, torch.Tensor] = dict(arrived or {})  # source tensor id -> the target's chained value
    first, first_call, first_output = None, None, None
    for i, c in enumerate(calls[:MAX_OPS]):
        row: dict[str, Any] = {"module": module_path, "index": i, "op": str(c.op), "inputs": describe_inputs(c.args),
                               "tolerance": tol, "local_rel_l2": math.nan, "chained_rel_l2": math.nan, "error": None}
        local = None
        try:
            flat, spec = tree_flatten((c.args, c.kwargs))
            ids = iter(c.input_ids)
            chained_in = [produced.get(next(ids), _as_target(x, cast_to)) if isinstance(x, torch.Tensor) else x
                          for x in flat]
            local_in = [_like(x, y) for x, y in zip(flat, chained_in)]
            local = stack.run_op(c.op, *torch.utils._pytree.tree_unflatten(local_in, spec), device)
            row["local_rel_l2"] = leaves_error(c.output, local)
            a, kw = torch.utils._pytree.tree_unflatten(chained_in, spec)
            chained = local if all(x is y for x, y in zip(chained_in, local_in)) else stack.run_op(c.op, a, kw, device)
            row["chained_rel_l2"] = leaves_error(c.output, chained)
            outs = [t for t in tree_flatten(chained)[0] if isinstance(t, torch.Tensor)]
            produced.update(zip(c.output_ids, outs))
        except Exception as exc:  # noqa: BLE001 - an op the target cannot run alone is a row, not a crash
            row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
        row["over_tolerance"] = bool(row["chained_rel_l2"] > tol)
        if first is None and row["over_tolerance"]:
            first, first_call, first_output = row, c, local
            row["first"] = True
        rows.append(row)
    if first is not None:
        first["verdict"] = ("the op itself loses accuracy on the target (its error fed the source's inputs is over tolerance)"
                            if first["local_rel_l2"] > tol else
                            "the op amplifies the small differences it is handed (alone on the source's inputs it is "
                            "within tolerance): an ill-conditioned formulation; rewrite it")
    return {"rows": rows, "first_op": first, "skipped": f"only the first {MAX_OPS} of {len(calls)} ops replayed" if cut else None,
            "first_call": first_call, "first_output": first_output}
