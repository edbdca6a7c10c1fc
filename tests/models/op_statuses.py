"""A model with one op per portability status, for `porter ops` tests.

- ``torch.nonzero``: data-dependent output shape. torchax registers it (predicted native) but
  jax.jit cannot trace it (confirmed unsupported); inductor calls the eager kernel (fallback).
- ``porter_test::softsign_host``: a custom op with a CPU kernel and a fake, no lowering
  anywhere: inductor falls back to it, torchax and the ONNX exporter cannot run it.
- ``topk``: inductor registers a lowering (predicted native), yet its CPU code calls the
  eager ATen kernel (confirmed host_fallback): the static table misleads.
- ``F.hardswish``: has a known decomposition (inductor's table decomposes it).
- ``porter_test::fast_exp``: exp with a deliberately cheap inductor decomposition,
  (1 + x/256)^256 by eight squarings, off by ~1e-3 relative: a numerics mismatch on inductor.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


@torch.library.custom_op("porter_test::softsign_host", mutates_args=())
def softsign_host(x: torch.Tensor) -> torch.Tensor:
    return x / (1 + x.abs())


@softsign_host.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


@torch.library.custom_op("porter_test::fast_exp", mutates_args=())
def fast_exp(x: torch.Tensor) -> torch.Tensor:
    return torch.exp(x)


@fast_exp.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def _cheap_exp(x: torch.Tensor) -> torch.Tensor:
    y = 1 + x / 256
    for _ in range(8):
        y = y * y
    return y


def _register_cheap_exp() -> None:
    from torch._inductor.decomposition import decompositions

    decompositions[torch.ops.porter_test.fast_exp.default] = _cheap_exp


_register_cheap_exp()


class OneOfEach(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor):
        h = self.fc(x)
        idx = torch.nonzero(h > 0)
        return softsign_host(h), F.hardswish(h), fast_exp(h), idx, h.topk(3, dim=-1).values


def one_of_each():
    g = torch.Generator().manual_seed(0)
    model = OneOfEach()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return model, (torch.randn(4, 16, generator=g),)


class DataDependentBranch(nn.Module):
    """Python control flow on a tensor value: torch.export cannot capture it."""

    def forward(self, x: torch.Tensor):
        if x.sum() > 0:
            return x * 2
        return x - 1


def data_dependent_branch():
    return DataDependentBranch(), (torch.randn(4, 4),)


class TopkHead(nn.Module):
    """An MLP whose head keeps the top-k features: topk falls back to the eager kernel on
    inductor's CPU code (the diagnosis with --ops must flag it)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(32, 64)
        self.fc2 = nn.Linear(16, 8)

    def forward(self, x: torch.Tensor):
        h = torch.relu(self.fc1(x))
        return self.fc2(h.topk(16, dim=-1).values)


def topk_head():
    torch.manual_seed(0)
    return TopkHead(), (torch.randn(8, 32),)
