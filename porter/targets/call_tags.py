"""Per-op-call identity tags for live captures: (module path, op, call index in the module).

Module tags (``porter.module:<path>``) say which module ran a piece of work; inside a module
nothing said which *call* it was, so two stacks' work could only be paired module by module.
Here every op call that a module's forward makes itself (not the calls an op makes inside its
own decomposition) gets the index of that op among the module's calls in this forward:
the third ``aten::view`` of ``attention/self`` is ``view#2`` on every stack that sees the same
program. Under torchax every dispatched op opens its own ``jax.named_scope(<op>)``; porter
wraps it in ``porter.call:<op>#<k>`` (see ``call_scope``), so each HLO op's op_name reads
``.../porter.module:<m>/porter.call:view#2/aten::view/reshape`` and the reader recovers
(module, op, k) (porter.core.tags.call_from_tags). Named scopes are metadata: the
compiled program is the same with or without them.

Ops are counted under their canonical name (porter.core.opclass.canonical_op: no ``aten::``
namespace, no overload, no dunder), because torchax sees some calls at the torch-function level
(``linear``) and others at the aten level (``aten::add.Tensor``), and the eager profiler names
them ``aten::linear`` and ``aten::add``. A torch function torchax does not lower
(``matmul``, ``layer_norm``) is run here, inside its call's scope and a scope with its name,
the way torchax's function mode would run it after the miss: its aten ops (``bmm``,
``native_layer_norm``) then belong to that one call, as their eager counterparts lie inside
``aten::matmul`` in the profiler's tree.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from typing import Any, Callable, Iterator

from porter.core.opclass import canonical_op
from porter.core.tags import call_scope

class CallCounter:
    """Counts op calls per (module, canonical op) within one forward."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()
        self.calls: list[tuple[str, str, int]] = []  # (module, canonical op, index), in call order

    def index(self, module: str, name: str) -> int:
        op = canonical_op(name)
        k = self.counts[(module, op)]
        self.counts[(module, op)] += 1
        self.calls.append((module, op, k))
        return k


FALLBACK_SPECIAL = ("rot90",)  # torchax's function mode handles these itself after a miss


def _name_of(func: Any) -> str:
    return func.name() if hasattr(func, "name") else getattr(func, "__name__", str(func))


@contextlib.contextmanager
def torchax_call_scopes(env: Any, current_module: Callable[[], str | None]) -> Iterator[CallCounter]:
    """While open, each op torchax dispatches at the top level of a module's forward runs
    inside ``jax.named_scope(porter.call:<op>#<k>)``; nested dispatches (an op's decomposition)
    are left alone. current_module() gives the running module's porter path (ModuleTracker)."""
    import jax
    import torch
    from torchax.tensor import OperatorNotFound

    counter = CallCounter()
    original = env.dispatch
    depth = [0]

    def dispatch(func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        if depth[0]:
            return original(func, types, args, kwargs)
        name = _name_of(func)
        k = counter.index(current_module() or "", name)
        depth[0] += 1
        try:
            with jax.named_scope(call_scope(canonical_op(name), k)):
                try:
                    return original(func, types, args, kwargs)
                except OperatorNotFound:
                    if isinstance(func, torch._ops.OpOverload) or name in FALLBACK_SPECIAL:
                        raise  # an aten op without a lowering: torchax's own error
                # a torch function torchax does not lower: run it as torchax would (its aten ops
                # then dispatch inside this call's scope, under the function's name)
                with jax.named_scope(name):
                    return func(*args, **(kwargs or {}))
        finally:
            depth[0] -= 1

    env.dispatch = dispatch
    try:
        yield counter
    finally:
        env.dispatch = original
