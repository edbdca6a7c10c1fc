"""What a TARGET names, parsed without importing any stack: ``DEVICE[:STACK]`` (``cpu``,
``cuda:inductor``, ``tpu``, ``cpu:ort``; a bare ``xla`` means JAX's default platform).

Here, not in porter.targets, so a mistyped target is answered in milliseconds: the stacks'
modules import torch or jax, which costs seconds before the first word of an error."""

from __future__ import annotations

from dataclasses import dataclass

from porter.core.errors import PorterError
from porter.core.stacks import STACKS
from porter.core.suggest import hint_with

DEVICES: tuple[str, ...] = ("cpu", "cuda", "rocm", "mps", "tpu")
AUTO_DEVICE = "auto"  # a bare stack name: the stack picks its own default platform
DEFAULT_STACK: dict[str, str] = {"cpu": "eager", "cuda": "eager", "rocm": "eager", "mps": "eager", "tpu": "xla"}


@dataclass(frozen=True)
class TargetSpec:
    device: str  # one of DEVICES, or AUTO_DEVICE for a bare stack name
    stack: str  # a registered stack name

    @property
    def text(self) -> str:
        return self.stack if self.device == AUTO_DEVICE else f"{self.device}:{self.stack}"


def parse_target(text: str) -> TargetSpec:
    """'cpu' -> cpu:eager, 'cuda:inductor', 'tpu' -> tpu:xla, 'xla' -> JAX's default platform."""
    raw = (text or "").strip().lower()
    device, _, stack = raw.partition(":")
    if not stack and device in STACKS and device not in DEVICES:
        device, stack = AUTO_DEVICE, device
    if device not in DEVICES and device != AUTO_DEVICE:
        bare = [*DEVICES, *(s for s in STACKS if s not in DEVICES)]
        raise PorterError(
            f"unknown device {device!r} in target {text!r}" if stack else f"unknown target {text!r}",
            hint=hint_with(device, DEVICES if stack else bare,
                           f"a target is DEVICE[:STACK]: DEVICE {', '.join(DEVICES)}; "
                           f"STACK {', '.join(STACKS)} (`porter targets`)"),
        )
    stack = stack or DEFAULT_STACK[device]
    if stack not in STACKS:
        raise PorterError(f"unknown stack {stack!r} in target {text!r}",
                          hint=hint_with(stack, STACKS, f"stacks: {', '.join(STACKS)}"))
    return TargetSpec(device, stack)
