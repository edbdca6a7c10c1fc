"""Execution stacks (part of the capture layer), one file each; a new stack is one file
plus one line in porter.core.stacks.STACKS (what it owns: catalogue keys, train step, ops).

Each module listed exposes ``STACK``: an instance of porter.targets.base.Stack. Modules
not yet written (or whose imports fail for a missing optional package) are reported as
unavailable by ``targets_table()`` rather than breaking the CLI. Shared here: ``base.py`` (the Stack interface),
``torch_common.py``, ``failure.py`` (naming the failing op), ``ceilings.py`` (measured
device ceilings) and ``torchax_shim.py`` (the one place that works around torchax's import).

May import: porter.core.errors and porter.core.schema; never the analysis, the reports or the CLI.
"""

from __future__ import annotations

import importlib
from typing import Iterator

from porter.core.errors import PorterError
from porter.core.stacks import STACKS
from porter.core.targetspec import AUTO_DEVICE, DEFAULT_STACK, DEVICES, TargetSpec, parse_target
from porter.targets.base import Activations, Availability, CaptureFailure, Prepared, Stack

# stack name -> module, from the one registry; the order is the order `porter targets` lists them in.
STACK_MODULES: dict[str, str] = {name: info.module for name, info in STACKS.items()}


class StackMissing(Stack):
    """Stand-in for a stack whose module cannot be imported: always unavailable, says why."""

    def __init__(self, name: str, why: str) -> None:
        self.name, self.why, self.devices = name, why, DEVICES

    def availability_impl(self, device: str) -> Availability:
        return Availability(False, self.why, f"install porter[{self.name}] or pick another stack")

    def prepare_impl(self, model, device):  # pragma: no cover - availability stops it first
        raise AssertionError("unavailable")

    sync_impl = profile_impl = module_activations_impl = prepare_impl


def get_stack(name: str) -> Stack:
    """The registered stack called name (a StackMissing when its module will not import)."""
    if name not in STACK_MODULES:
        raise PorterError(f"unknown stack {name!r}", hint=f"stacks: {', '.join(STACK_MODULES)}")
    try:
        mod = importlib.import_module(STACK_MODULES[name])
    except ImportError as exc:
        return StackMissing(name, f"cannot import {STACK_MODULES[name]} ({exc})")
    return mod.STACK


def resolve(target: str) -> tuple[TargetSpec, Stack]:
    spec = parse_target(target)
    return spec, get_stack(spec.stack)


def all_targets() -> Iterator[TargetSpec]:
    """Every DEVICE:STACK pair a registered stack claims, plus bare stack names (auto)."""
    for name in STACK_MODULES:
        stack = get_stack(name)
        if isinstance(stack, StackMissing):
            yield TargetSpec(AUTO_DEVICE, name)  # one row saying why it is missing
            continue
        for device in stack.devices:
            yield TargetSpec(device, name)


__all__ = [
    "AUTO_DEVICE", "DEFAULT_STACK", "DEVICES", "STACK_MODULES", "Activations", "Availability",
    "CaptureFailure", "Prepared", "Stack", "TargetSpec", "all_targets", "get_stack", "parse_target", "resolve",
]
