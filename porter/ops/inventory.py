"""A model's op inventory from torch.export: every call's op overload, input dtypes, shape
class and module path, grouped into distinct variations, each with the inputs one real call
received (recorded by running the exported graph on the model's example inputs).

Why torch.export: its graph is the ATen-level program every stack starts from (inductor
lowers it, torchax interprets it, the ONNX exporter translates it), so its op overloads are
the unit the stacks' registries are keyed by.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch
import torch.fx
from torch._ops import OpOverload

from porter.core.errors import PorterError
from porter.targets.base import module_path
from porter.targets.outputs import leaf_outputs


class ExportFailure(PorterError):
    """torch.export cannot capture the model: the exporter's reason and where it broke."""


@dataclass
class Variant:
    """One distinct (op overload, input dtypes, shape class) of the model, with real inputs."""

    op: OpOverload
    dtypes: list[str]
    shape_class: str
    args: tuple[Any, ...] | None  # of the first call, tensors cloned; None: no inputs (core ATen mode)
    kwargs: dict[str, Any]
    calls: int = 0
    modules: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return op_name(self.op)


def op_name(op: OpOverload) -> str:
    """aten.sort.default: namespace, op, overload (the dispatcher's name, dotted)."""
    return f"{op.namespace}.{op._opname}.{op._overloadname}"


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def tensors_in(args: Any) -> list[torch.Tensor]:
    return [t for t in torch.utils._pytree.tree_leaves(args) if isinstance(t, torch.Tensor)]


def shape_class(tensors: list[torch.Tensor]) -> str:
    """Ranks of the tensor inputs ('2d,1d'); an empty tensor is 'empty'. Ranks, not sizes:
    a stack's support changes with rank and emptiness, rarely with the size itself."""
    return ",".join("empty" if t.numel() == 0 else f"{t.dim()}d" for t in tensors) or "none"


def export_model(module: torch.nn.Module, inputs: tuple[Any, ...], name: str) -> torch.export.ExportedProgram:
    """torch.export.export (non-strict); a capture failure names the exporter's reason and the
    user line where the graph broke (the first frame of the model's own code in the message)."""
    try:
        with torch.no_grad(), leaf_outputs(module.eval()) as flat:  # any output pytree: its tensors
            return torch.export.export(flat, tuple(inputs), strict=False)
    except Exception as exc:
        text = str(exc)
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        reason = lines[0] if lines else type(exc).__name__
        frames = [i for i, ln in enumerate(lines) if ln.startswith('File "') and "/torch/" not in ln]
        where = ""
        if frames:  # the model's own line the exporter stopped at, and its code
            i = frames[-1]
            where = lines[i] + (f": {lines[i + 1]}" if i + 1 < len(lines) else "")
        raise ExportFailure(
            f"torch.export cannot capture model {name}: {type(exc).__name__}: {reason[:300]}"
            + (f"; graph break at {where[:200]}" if where else ""),
            hint="make the data-dependent part static (torch.cond, torch._check, fixed shapes) or port that part by hand",
        ) from None


def _module_of(node: torch.fx.Node) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    qualified = list(stack.values())[-1][0]
    return module_path(str(qualified).removeprefix("L['self'].").removeprefix("L__self__."))


def _clone(value: Any) -> Any:
    """Tensors cloned; fx's immutable lists/dicts made plain (compilers and pytree expect them)."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (list, tuple)):
        items = [_clone(v) for v in value]
        return tuple(items) if isinstance(value, tuple) else items
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    return value


def with_defaults(op: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """Positional arguments the call left to their defaults, filled in from the schema: a
    stack's implementation may expect them (the way a module's own call passes them)."""
    full = list(args)
    for arg in op._schema.arguments[len(args):]:
        if arg.kwarg_only or arg.name in kwargs or not arg.has_default_value():
            break
        full.append(arg.default_value)
    return tuple(full)


class _Recorder(torch.fx.Interpreter):
    """Runs the exported graph for real, keeping the first inputs of each op variation."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        super().__init__(gm)
        self.variants: dict[tuple, Variant] = {}

    def run_node(self, n: torch.fx.Node) -> Any:
        result = super().run_node(n)
        if n.op == "call_function" and isinstance(n.target, OpOverload) and tensors_in(result):
            # ops without a tensor result (sym_size, _assert_scalar) are shape bookkeeping, not work
            args, kwargs = self.fetch_args_kwargs_from_env(n)
            tensors = tensors_in((args, kwargs))
            dtypes = [dtype_name(t.dtype) for t in tensors]
            key = (n.target, tuple(dtypes), shape_class(tensors))
            v = self.variants.get(key)
            if v is None:
                v = self.variants[key] = Variant(n.target, dtypes, key[2], _clone(args), _clone(kwargs))
            v.calls += 1
            where = _module_of(n)
            if where not in v.modules:
                v.modules.append(where)
        return result


def inventory(module: torch.nn.Module, inputs: tuple[Any, ...], name: str) -> list[Variant]:
    """The model's distinct op variations, in first-call order, with recorded real inputs."""
    ep = export_model(module, inputs, name)
    gm = ep.module()
    flat = [x for x in torch.utils._pytree.tree_leaves(tuple(inputs))]
    rec = _Recorder(gm)
    with torch.no_grad():
        rec.run(*flat)
    return list(rec.variants.values())


def decompose(op: OpOverload, args: tuple[Any, ...] | None, kwargs: Mapping[str, Any],
              table: Mapping[Any, Callable[..., Any]]) -> list[str]:
    """The distinct ops `op` becomes under a decomposition table (applied recursively, as the
    stacks apply it), traced on fake copies of real inputs; [] when the table has no entry."""
    if op not in table or args is None:  # no recorded inputs (core ATen mode): nothing to trace
        return []
    from torch.fx.experimental.proxy_tensor import make_fx

    def one(*a: Any) -> Any:
        return op(*a, **kwargs)

    try:
        gm = make_fx(one, decomposition_table=dict(table), tracing_mode="fake")(*args)
    except Exception as exc:  # a decomposition that cannot trace these inputs is no decomposition
        return [f"(decomposition failed to trace: {type(exc).__name__})"]
    seen: list[str] = []
    for n in gm.graph.nodes:
        if n.op == "call_function" and isinstance(n.target, OpOverload):
            name = op_name(n.target)
            if name not in seen:
                seen.append(name)
    return seen


def core_aten_table() -> Mapping[Any, Callable[..., Any]]:
    from torch._decomp import core_aten_decompositions

    return core_aten_decompositions()
