"""--all-core-aten: every core ATen op overload (torch.Tag.core in this torch build) as a row,
each stack's status predicted from its registries. No model supplies inputs, so nothing
runs: a model's own ops are confirmed by `porter ops MODEL`."""

from __future__ import annotations

import torch
from torch._ops import OpOverload

from porter.ops.inventory import Variant


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


def core_aten_variants() -> list[Variant]:
    return [Variant(op, [], "any", None, {}) for op in core_aten_ops()]
