"""A model whose forward warns as third-party code does (torch's pytree FutureWarning about
LeafSpec, printed by a stack mid-run): the warning belongs in porter's log, not the terminal."""

from __future__ import annotations

import warnings

import torch
from torch import nn


class Warns(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        warnings.warn("isinstance(treespec, LeafSpec) is deprecated", FutureWarning, stacklevel=1)
        return torch.relu(self.fc(x))


def factory() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    return Warns(), (torch.randn(8, 16),)
