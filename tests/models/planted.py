"""A residual MLP stack with one planted, numerically fragile formulation (or none).

Every norm is mathematically a LayerNorm; the planted one computes the variance in one pass
after shifting its input by SHIFT (var(x + c) = var(x) exactly, but E[x^2] - E[x]^2 then
cancels ~5 digits), so its result keeps only the rounding error of two float32 sums, which
depends on the summation order a stack uses. Where it sits:

* ``early()``: blocks/0/pre_norm, a one-argument module at the start;
* ``last()``: head_norm, the last layer before the output projection;
* ``two_arg()``: blocks/2/add_norm, whose forward takes two tensors (hidden, residual);
* ``last_short()``: ``last`` with 4 blocks (a quicker per-module inductor run);
* ``clean()``: none (every norm is the two-pass LayerNorm).
"""

from __future__ import annotations

import torch
from torch import nn

WIDTH = 128
BLOCKS = 8
SHIFT = 300.0


def _one_pass(x: torch.Tensor) -> torch.Tensor:
    x = x + SHIFT  # a no-op for a normalisation in exact arithmetic
    mean = x.mean(-1, keepdim=True)
    var = (x * x).mean(-1, keepdim=True) - mean * mean  # catastrophic cancellation
    return (x - mean) * torch.rsqrt(var.clamp_min(1e-6))


class Norm(nn.Module):
    def __init__(self, fragile: bool = False) -> None:
        super().__init__()
        self.fragile = fragile

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _one_pass(x) if self.fragile else nn.functional.layer_norm(x, x.shape[-1:])


class AddNorm(nn.Module):
    """Post-residual norm: the BertSelfOutput shape, two tensor arguments."""

    def __init__(self, fragile: bool = False) -> None:
        super().__init__()
        self.norm_fragile = fragile

    def forward(self, hidden: torch.Tensor, residual: torch.Tensor, *, scale: float = 1.0) -> torch.Tensor:
        x = hidden * scale + residual
        return _one_pass(x) if self.norm_fragile else nn.functional.layer_norm(x, x.shape[-1:])


class Block(nn.Module):
    def __init__(self, pre_fragile: bool, add_fragile: bool) -> None:
        super().__init__()
        self.pre_norm = Norm(pre_fragile)
        self.fc1 = nn.Linear(WIDTH, 2 * WIDTH)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(2 * WIDTH, WIDTH)
        self.add_norm = AddNorm(add_fragile)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.add_norm(self.fc2(self.act(self.fc1(self.pre_norm(x)))), x, scale=0.5)


class Planted(nn.Module):
    def __init__(self, where: str, blocks: int = BLOCKS) -> None:
        super().__init__()
        self.embed = nn.Linear(32, WIDTH)
        self.blocks = nn.ModuleList(Block(where == "early" and i == 0, where == "two_arg" and i == 2) for i in range(blocks))
        self.head_norm = Norm(where == "last")
        self.head = nn.Linear(WIDTH, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for block in self.blocks:
            h = block(h)
        return self.head(self.head_norm(h))


def _build(where: str, blocks: int = BLOCKS) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    return Planted(where, blocks).eval(), (torch.randn(4, 16, 32, generator=torch.Generator().manual_seed(1)),)


def early() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    return _build("early")


def last() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    return _build("last")


def last_short() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """``last`` with 4 blocks: 10 nn.Linear instances, past dynamo's default recompile limit of 8."""
    return _build("last", 4)


def two_arg() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    return _build("two_arg")


def clean() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    return _build("none")
