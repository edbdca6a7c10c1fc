"""A PyTorch transformer and its Flax NNX rewrite with the same weights, each with its own
framework's names (torch: layers/N/attention/in_proj, norm1, ff/up; Flax: blocks/N/attn/qkv, ln1,
mlp/fc1), for porter to pair module by module by their parameters. `nnx_twin_bad_eps` plants a
numerical bug in one JAX module: blocks/1/ln2's epsilon 1e-1 where torch's LayerNorm has 1e-5;
`nnx_twin_fp16_fc1` runs blocks/1/mlp/fc1's matmul in float16."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

VOCAB, DIM, HEADS, LAYERS, BATCH, SEQ = 512, 128, 4, 2, 4, 64
EPS = 1e-5  # torch.nn.LayerNorm's default; Flax's is 1e-6, so the rewrite states it


class TorchAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.in_proj = nn.Linear(DIM, 3 * DIM)
        self.out_proj = nn.Linear(DIM, DIM)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.in_proj(x).chunk(3, dim=-1)
        split = lambda a: a.reshape(b, t, HEADS, d // HEADS).transpose(1, 2)  # noqa: E731
        q, k, v = split(q), split(k), split(v)
        att = torch.softmax(q @ k.transpose(-1, -2) / (d // HEADS) ** 0.5, dim=-1)
        return self.out_proj((att @ v).transpose(1, 2).reshape(b, t, d))


class TorchFF(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(DIM, 4 * DIM)
        self.down = nn.Linear(4 * DIM, DIM)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(nn.functional.gelu(self.up(x)))


class TorchLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.attention = nn.LayerNorm(DIM, eps=EPS), TorchAttention()
        self.norm2, self.ff = nn.LayerNorm(DIM, eps=EPS), TorchFF()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x))
        return x + self.ff(self.norm2(x))


class TorchTwin(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList([TorchLayer() for _ in range(LAYERS)])
        self.lm_head = nn.Linear(DIM, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(x)


def _made() -> tuple[TorchTwin, torch.Tensor]:
    torch.manual_seed(0)
    model = TorchTwin().eval()
    with torch.no_grad():  # LayerNorms away from ones and zeros, so each is its own (and the eps matters)
        for m in model.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.1, 0.1)
    tokens = torch.from_numpy(np.random.default_rng(0).integers(0, VOCAB, (BATCH, SEQ)))
    return model, tokens


def torch_twin():
    model, tokens = _made()
    return model, (tokens,)


def _nnx_from(model: TorchTwin, eps_of: dict[str, float], half: frozenset[str] = frozenset()):
    import jax
    import jax.numpy as jnp
    from flax import nnx

    w = {k: jnp.asarray(v.detach().numpy()) for k, v in model.state_dict().items()}

    def linear(prefix: str, rngs: nnx.Rngs) -> nnx.Linear:
        out_f, in_f = w[prefix + ".weight"].shape
        lin = nnx.Linear(in_f, out_f, rngs=rngs)
        lin.kernel.value, lin.bias.value = w[prefix + ".weight"].T, w[prefix + ".bias"]
        return lin

    def norm(prefix: str, path: str, rngs: nnx.Rngs) -> nnx.LayerNorm:
        ln = nnx.LayerNorm(DIM, epsilon=eps_of.get(path, EPS), rngs=rngs)
        ln.scale.value, ln.bias.value = w[prefix + ".weight"], w[prefix + ".bias"]
        return ln

    class Attn(nnx.Module):
        def __init__(self, i: int, rngs: nnx.Rngs):
            self.qkv, self.proj = linear(f"layers.{i}.attention.in_proj", rngs), linear(f"layers.{i}.attention.out_proj", rngs)

        def __call__(self, x):
            b, t, d = x.shape
            q, k, v = jnp.split(self.qkv(x), 3, axis=-1)
            split = lambda a: a.reshape(b, t, HEADS, d // HEADS).transpose(0, 2, 1, 3)  # noqa: E731
            q, k, v = split(q), split(k), split(v)
            att = jax.nn.softmax(q @ k.transpose(0, 1, 3, 2) / (d // HEADS) ** 0.5, axis=-1)
            return self.proj((att @ v).transpose(0, 2, 1, 3).reshape(b, t, d))

    class HalfLinear(nnx.Module):  # the planted bug: the matmul in float16, the result back in float32
        def __init__(self, prefix: str):
            self.kernel, self.bias = nnx.Param(w[prefix + ".weight"].T), nnx.Param(w[prefix + ".bias"])

        def __call__(self, x):
            return (x.astype(jnp.float16) @ self.kernel.value.astype(jnp.float16)).astype(jnp.float32) + self.bias.value

    class Mlp(nnx.Module):
        def __init__(self, i: int, rngs: nnx.Rngs):
            up = f"layers.{i}.ff.up"
            self.fc1 = HalfLinear(up) if f"blocks/{i}/mlp/fc1" in half else linear(up, rngs)
            self.fc2 = linear(f"layers.{i}.ff.down", rngs)

        def __call__(self, x):
            return self.fc2(jax.nn.gelu(self.fc1(x), approximate=False))  # torch's GELU is the exact one

    class Block(nnx.Module):
        def __init__(self, i: int, rngs: nnx.Rngs):
            self.ln1, self.attn = norm(f"layers.{i}.norm1", f"blocks/{i}/ln1", rngs), Attn(i, rngs)
            self.ln2, self.mlp = norm(f"layers.{i}.norm2", f"blocks/{i}/ln2", rngs), Mlp(i, rngs)

        def __call__(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))

    class Transformer(nnx.Module):
        def __init__(self, rngs: nnx.Rngs):
            self.tok = nnx.Embed(VOCAB, DIM, rngs=rngs)
            self.tok.embedding.value = w["embed.weight"]
            self.blocks = nnx.List([Block(i, rngs) for i in range(LAYERS)])
            self.head = linear("lm_head", rngs)

        def __call__(self, tokens):
            x = self.tok(tokens)
            for block in self.blocks:
                x = block(x)
            return self.head(x)

    return Transformer(nnx.Rngs(0))


def nnx_twin():
    import jax.numpy as jnp

    model, tokens = _made()
    return _nnx_from(model, {}), (jnp.asarray(tokens.numpy(), jnp.int32),)


def nnx_twin_bad_eps():
    import jax.numpy as jnp

    model, tokens = _made()
    return _nnx_from(model, {"blocks/1/ln2": 1e-1}), (jnp.asarray(tokens.numpy(), jnp.int32),)


def nnx_twin_fp16_fc1():
    import jax.numpy as jnp

    model, tokens = _made()
    return _nnx_from(model, {}, frozenset({"blocks/1/mlp/fc1"})), (jnp.asarray(tokens.numpy(), jnp.int32),)
