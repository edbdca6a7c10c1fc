"""A model with one numerically fragile module: the planted accuracy gap.

``norm`` normalises with the one-pass variance E[x^2] - E[x]^2. Its input has a mean of
about 300 and a spread of about 1, so the two terms agree to ~5 digits and cancel: the
result keeps only the rounding error of two float32 sums, which depends on the order in
which the stack sums (ATen's vectorised reduction, XLA's or inductor's generated loop).
Every other module is well conditioned, so on another stack they only inherit the error.
"""

from __future__ import annotations

import torch
from torch import nn

WIDTH = 256
OFFSET = 300.0


class OnePassNorm(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(-1, keepdim=True)
        var = (x * x).mean(-1, keepdim=True) - mean * mean  # catastrophic cancellation
        return (x - mean) * torch.rsqrt(var.clamp_min(1e-6))


class Fragile(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pre = nn.Linear(WIDTH, WIDTH)
        self.norm = OnePassNorm()
        self.fc = nn.Linear(WIDTH, 2 * WIDTH)
        self.act = nn.GELU()
        self.out = nn.Linear(2 * WIDTH, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.act(self.fc(self.norm(self.pre(x)))))


def model() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    m = Fragile().eval()
    with torch.no_grad():  # pre: near identity plus a large offset, so norm's input is ~300 +- 1
        m.pre.weight.copy_(torch.eye(WIDTH) + 0.01 * torch.randn(WIDTH, WIDTH))
        m.pre.bias.fill_(OFFSET)
    return m, (torch.randn(32, WIDTH, generator=torch.Generator().manual_seed(1)),)
