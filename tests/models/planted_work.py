"""A model whose step does a fixed amount of work, plus a planted extra share of it.

PORTER_BENCH_SLOWDOWN=0.10 makes every forward repeat its small matmul 10% more often
(read when the factory builds the model): real extra work on the CPU, so the planted
slowdown meets the machine's real noise (preemption, caches, neighbours) like a
regression would. fixtures/make_bench_history.py records runs of it into a history.
"""

from __future__ import annotations

import os

import torch
from torch import nn

BASE_REPEATS = 100  # a few ms of small matmuls on one busy core
SLOWDOWN_ENV = "PORTER_BENCH_SLOWDOWN"


class PlantedWork(nn.Module):
    def __init__(self, repeats: int) -> None:
        super().__init__()
        self.repeats = repeats
        self.weight = nn.Parameter(torch.randn(64, 64) / 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x
        for _ in range(self.repeats):
            y = torch.tanh(y @ self.weight)
        return y


def factory() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    slowdown = float(os.environ.get(SLOWDOWN_ENV, "0") or 0)
    return PlantedWork(round(BASE_REPEATS * (1 + slowdown))), (torch.randn(64, 64),)
