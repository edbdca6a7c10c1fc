"""Model factories for capture tests: each fails or misbehaves in one known place."""

import torch
from torch import nn


@torch.library.custom_op("porter_test::host_only", mutates_args=())
def host_only(x: torch.Tensor) -> torch.Tensor:
    """A custom op with no fake (meta) implementation: eager runs it, torch.compile cannot."""
    return x.clone()


class HostOnly(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return host_only(self.fc(x))


class Shapes(nn.Module):
    """fc2 expects 16 features but gets 8: aten.addmm fails inside module 'body/fc2'."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 8)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(self.fc1(x))


class Outer(nn.Module):
    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.pre = nn.Linear(8, 8)
        self.body = inner

    def forward(self, x):
        return self.body(self.pre(x))


class MakesNaN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return torch.log(self.fc(x) - 100.0)  # log of negatives -> NaN


def custom_op_model():
    torch.manual_seed(0)
    return Outer(HostOnly()), (torch.randn(4, 8),)


def shape_bug_model():
    torch.manual_seed(0)
    return Outer(Shapes()), (torch.randn(4, 8),)


def nan_model():
    torch.manual_seed(0)
    return MakesNaN(), (torch.randn(4, 8),)


def not_a_pair():
    return nn.Linear(2, 2)


def bad_inputs():
    return nn.Linear(2, 2), "not tensors"


def raises():
    raise ValueError("weights file missing")
