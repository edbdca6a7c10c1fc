"""--all-core-aten: every core ATen op overload (torch.Tag.core in this torch build) as a row.

Inputs come from torch's own OpInfo database (torch.testing._internal, which needs the
`expecttest` package): each OpInfo's first float32 samples run eagerly under a dispatch mode
that keeps the first call of every core ATen overload, arguments and all. An op that gets
inputs this way is predicted and confirmed like a model's op; one that gets none (backward
ops, symbolic-size helpers, a few overloads OpInfo never reaches) is predicted only.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch._ops import OpOverload
from torch.utils._python_dispatch import TorchDispatchMode

from porter.core.errors import PorterError
from porter.ops.inventory import Variant, _clone, dtype_name, shape_class, tensors_in

SAMPLES_PER_OPINFO = 3


def core_aten_ops() -> list[OpOverload]:
    """Overloads tagged core in this build, sorted by name."""
    found: list[OpOverload] = []
    for name in sorted(dir(torch.ops.aten)):
        try:
            packet = getattr(torch.ops.aten, name)
            overloads = packet.overloads()
        except (AttributeError, RuntimeError):
            continue
        for ov in overloads:
            op = getattr(packet, ov, None)
            if isinstance(op, OpOverload) and torch.Tag.core in op.tags:
                found.append(op)
    return found


class _FirstCalls(TorchDispatchMode):
    """Keeps the first call (cloned arguments) of each op in `wanted`."""

    def __init__(self, wanted: set[OpOverload]) -> None:
        super().__init__()
        self.wanted, self.calls = wanted, {}

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        keep = func in self.wanted and func not in self.calls
        saved = (_clone(args), _clone(kwargs)) if keep else None  # before the call: in-place ops mutate
        out = func(*args, **kwargs)
        if saved is not None:  # only calls the op accepted
            self.calls[func] = saved
        return out


def opinfo_inputs(ops: list[OpOverload]) -> dict[OpOverload, tuple[tuple[Any, ...], dict[str, Any]]]:
    """op -> (args, kwargs) of a real call recorded while OpInfo samples ran in float32."""
    try:
        from torch.testing._internal.common_methods_invocations import op_db
    except ImportError as exc:
        raise PorterError(f"--all-core-aten needs torch's OpInfo database: {exc}", hint="pip install expecttest") from None
    rec = _FirstCalls(set(ops))
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for info in op_db:
            try:
                samples = list(info.sample_inputs("cpu", torch.float32, requires_grad=False))[:SAMPLES_PER_OPINFO]
            except Exception:
                continue
            for s in samples:
                try:
                    with torch.no_grad(), rec:
                        info.op(s.input, *s.args, **s.kwargs)
                except Exception:
                    pass  # a sample the op rejects on CPU teaches nothing here
    return rec.calls


def core_aten_variants() -> list[Variant]:
    ops = core_aten_ops()
    calls = opinfo_inputs(ops)
    out = []
    for op in ops:
        if op not in calls:
            out.append(Variant(op, [], "no inputs", None, {}))
            continue
        args, kwargs = calls[op]
        tensors = tensors_in((args, kwargs))
        out.append(Variant(op, [dtype_name(t.dtype) for t in tensors], shape_class(tensors),
                           args, kwargs, calls=1))
    return out
