"""Built-in models: small enough for two CPU cores, real in shape.

Weights and inputs come from a fixed seed, so two captures of the same built-in on
different targets run the same numbers. The transformer spells attention out
(q/k/v Linear, matmul, softmax, matmul) so every stack shows the same op sequence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

SEED = 0


class CausalSelfAttention(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = self.heads

        def split(y: torch.Tensor) -> torch.Tensor:
            return y.view(b, t, h, d // h).transpose(1, 2)

        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d // h)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
        att = torch.softmax(scores, dim=-1)
        y = torch.matmul(att, v).transpose(1, 2).reshape(b, t, d)
        return self.proj(y)


class MLPBlock(nn.Module):
    def __init__(self, d: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    """Pre-LN decoder block: x + attn(ln1(x)), then x + mlp(ln2(x))."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, heads)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = MLPBlock(d, 4 * d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyDecoder(nn.Module):
    def __init__(self, vocab: int = 512, d: int = 128, heads: int = 4, layers: int = 2, seq: int = 64) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.tok(ids) + self.pos(pos)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


class SmallCNN(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        )
        self.classifier = nn.Linear(32, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))


def _seeded() -> torch.Generator:
    torch.manual_seed(SEED)  # module initialisers draw from the global generator
    return torch.Generator().manual_seed(SEED + 1)


def transformer() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """2-layer pre-LN decoder, d=128, 4 heads, seq 64, batch 2, vocab 512."""
    g = _seeded()
    model = TinyDecoder()
    ids = torch.randint(0, 512, (2, 64), generator=g)
    return model, (ids,)


def cnn() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """Two conv/BN/ReLU stages with pooling and a linear classifier; batch 4 of 3x32x32."""
    g = _seeded()
    model = SmallCNN()
    with torch.no_grad():  # non-trivial BN statistics, so eval-mode BN does real work
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1, generator=g)
                m.running_var.uniform_(0.5, 1.5, generator=g)
    x = torch.randn(4, 3, 32, 32, generator=g)
    return model, (x,)


def mlp() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """Three Linear layers with GELU; batch 32 of 256 features."""
    g = _seeded()
    model = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 512), nn.GELU(), nn.Linear(512, 10))
    x = torch.randn(32, 256, generator=g)
    return model, (x,)


@dataclass(frozen=True)
class Builtin:
    factory: Callable[[], tuple[nn.Module, tuple[torch.Tensor, ...]]]
    about: str


BUILTINS: dict[str, Builtin] = {
    "transformer": Builtin(transformer, "decoder-only transformer: embedding, 2 pre-LN blocks (causal softmax attention, GELU MLP), LM head"),
    "cnn": Builtin(cnn, "CNN: conv, batch norm, ReLU, pooling, linear"),
    "mlp": Builtin(mlp, "MLP: 3 Linear layers with GELU"),
}
