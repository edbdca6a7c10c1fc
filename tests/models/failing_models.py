"""Models that cannot run on a compiling stack, each for one known reason, inside one
known module (``body/act``): a data-dependent output shape, a custom op with no lowering,
a dtype the stack does not support."""

from __future__ import annotations

import torch
from torch import nn


@torch.library.custom_op("mylib::fancy_act", mutates_args=())
def fancy_act(x: torch.Tensor) -> torch.Tensor:
    """A user's custom op: eager runs it; no stack has a lowering for it."""
    return x * torch.sigmoid(x) + 0.1


@fancy_act.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class Unique(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.unique(x.round())  # output length depends on the values


class NonZero(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[torch.nonzero(x > 0, as_tuple=True)]


class Fancy(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fancy_act(x)


class ComplexAct(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # complex32 (chalf): eager CPU multiplies it; torchax has no JAX type for it
        return torch.view_as_real(x.to(torch.complex32) * 2).float().sum(-1)


class Body(nn.Module):
    def __init__(self, act: nn.Module) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.act = act

    def forward(self, x):
        return self.act(self.fc(x))


class Outer(nn.Module):
    def __init__(self, act: nn.Module) -> None:
        super().__init__()
        self.pre = nn.Linear(8, 8)
        self.body = Body(act)

    def forward(self, x):
        return self.body(self.pre(x))


def _make(act: nn.Module):
    torch.manual_seed(0)
    return Outer(act).eval(), (torch.randn(4, 8),)


def unique_model():
    return _make(Unique())


def nonzero_model():
    return _make(NonZero())


def custom_op_model():
    return _make(Fancy())


def chalf_model():
    return _make(ComplexAct())
