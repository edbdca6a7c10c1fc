"""One op variation as a runnable unit: an nn.Module whose forward calls the op overload on
the recorded tensors (non-tensor arguments fixed), and the fp64 / same-dtype eager references.

Every stack runs the same OneOp, so a status says what the stack does with this op alone.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.utils._pytree as pytree

from porter.ops.inventory import Variant, with_defaults


class OneOp(torch.nn.Module):
    """forward(*tensors) = op(*args, **kwargs) with the recorded tensors as the inputs."""

    def __init__(self, variant: Variant, fill_defaults: bool = False) -> None:
        super().__init__()
        args = with_defaults(variant.op, variant.args, variant.kwargs) if fill_defaults else variant.args
        leaves, self._spec = pytree.tree_flatten((args, variant.kwargs))
        self._slots = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]
        self._leaves = [None if isinstance(x, torch.Tensor) else x for x in leaves]
        self.op = variant.op
        self.inputs = tuple(leaves[i] for i in self._slots)

    def call_args(self, tensors: tuple[Any, ...]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        leaves = list(self._leaves)
        for i, t in zip(self._slots, tensors):
            leaves[i] = t
        return pytree.tree_unflatten(leaves, self._spec)

    def forward(self, *tensors: Any) -> Any:
        args, kwargs = self.call_args(tensors)
        return self.op(*args, **kwargs)


def output_tensors(out: Any) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


def is_random(variant: Variant) -> bool:
    return torch.Tag.nondeterministic_seeded in getattr(variant.op, "tags", ())


def eager(one: OneOp) -> list[torch.Tensor]:
    with torch.no_grad():
        return output_tensors(one(*[t.clone() for t in one.inputs]))


def fp64_reference(one: OneOp) -> list[torch.Tensor] | None:
    """The op in float64 on the CPU (floating inputs and dtype arguments widened); None when the
    op has no float64 kernel (then the eager result in its own dtype is all there is)."""
    def widen(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            return x.double()
        if isinstance(x, torch.dtype) and x.is_floating_point:
            return torch.float64
        return x

    args, kwargs = one.call_args(one.inputs)
    args, kwargs = pytree.tree_map(widen, (args, kwargs))
    try:
        with torch.no_grad():
            return output_tensors(one.op(*args, **kwargs))
    except Exception:
        return None
